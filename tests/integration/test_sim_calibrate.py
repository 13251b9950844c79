"""`agentload sim calibrate` against the simulator itself recovers the profile it runs, and the
simulator's output coalescing puts the configured share of tokens into shared chunks."""

from __future__ import annotations

import json
import statistics
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from typer.testing import CliRunner

from agentload.calibration.calibrate import (
    OVERHEAD_REQUESTS,
    calibrate,
    pool,
    serving_overhead,
    short_request_ttfts,
    summary_lines,
    without_overhead,
)
from agentload.calibration.fit import PARAMS
from agentload.calibration.probe import ProbePlan
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Target, model_clock, stream_call
from agentload.cli import app
from agentload.sim import SimConfig, SimProcess, SimServer
from agentload.sim.profiles import Profile, load_profile

# A profile unlike every built-in one, with chunked prefill (2048-token steps) in play.
KNOWN = Profile(
    name="known",
    step_overhead_s=0.004,
    prefill_token_s=3.0e-5,
    decode_seq_s=0.0008,
    prefill_attention_s=2.0e-8,
    decode_context_token_s=1.0e-7,
    decode_max_context_s=5.0e-7,
    decode_kv_token_s=3.0e-7,
    request_overhead_s=0.02,
    frontend_token_s=2.0e-6,
    frontend_step_s=0.003,
    idle_wake_s=0.02,
    idle_wake_per_s=0.001,
    coalesce_first_p=0.25,
    coalesce_first_run=0.7,
    max_num_seqs=64,
    max_num_batched_tokens=2048,
    kv_blocks=4096,
    block_size=64,
    max_model_len=16384,
)


def _assert_recovered(got: Profile) -> None:
    for name in (*PARAMS, "idle_wake_s", "idle_wake_per_s"):
        assert getattr(got, name) == pytest.approx(getattr(KNOWN, name), rel=0.05), name
    assert got.max_num_batched_tokens == 2048
    assert got.block_size == 64
    assert got.kv_blocks == 4096


async def test_calibration_recovers_the_simulators_profile() -> None:
    # The model clock makes the fit exact; speedup 10 keeps it short while leaving the
    # probe's streams milliseconds of wall time to overlap on a busy host.
    async with SimServer(SimConfig(port=0, profile=KNOWN, speedup=10, model="m")) as sim:
        lines: list[str] = []
        result = await calibrate(
            Target(sim.base_url, "m"), name="fitted", plan=ProbePlan.quick(), say=lines.append
        )
    _assert_recovered(result.profile)
    assert result.profile.calibrated
    cal = result.profile.calibration or {}
    assert cal["clock"] == "model"
    assert cal["server"]["engine"] == "agentload-sim"
    assert cal["fit"]["all"]["max_abs_error"] < 0.01
    # 8 first-chunk streams on consecutive requests: the van der Corput draw holds 2 of them
    assert result.profile.coalesce_first_p == pytest.approx(0.25, abs=0.13)
    assert result.profile.coalesce_first_run > 0
    assert cal["first_chunk"]["streams"] == 8
    assert cal["idle_start"]["pairs"] == 1  # --quick: one round of one pair
    # most of the busy-start arrivals bound the front end; every one agrees on the model clock
    busy = cal["busy_start"]
    assert busy["arrivals"] >= 32 and busy["consistent"] == busy["arrivals"]
    assert result.profile.request_overhead_sigma == 0  # so every front end is the same
    # over two contexts: steps of two lengths, so that the stretch an arrival adds to the step
    # it comes in does not hide the front end's end (docs/simulator.md, probe step 9)
    assert cal["probe"]["busy_contexts"] == [256, 2048]
    assert result.profile.idle_wake_cap_s == cal["probe"]["idle_pause_s"] == 5.0
    assert "load_avg_1m_before" in cal["host"]
    assert any("the probe takes about" in line for line in lines)
    assert any("2048 tokens per step" in line for line in lines)


async def test_calibration_recovers_the_spread_of_the_busy_front_end() -> None:
    # Each request's front end drawn from a lognormal around 20 ms: the busy-start bounds
    # give back its spread and median (docs/simulator.md, "The busy front end's spread").
    spread = KNOWN.model_copy(update={"request_overhead_sigma": 0.3})
    async with SimServer(SimConfig(port=0, profile=spread, speedup=10, model="m")) as sim:
        result = await calibrate(Target(sim.base_url, "m"), name="fitted", plan=ProbePlan.quick())
    p = result.profile
    busy = (p.calibration or {})["busy_start"]
    assert busy["arrivals"] >= 32 and busy["consistent"] < busy["arrivals"]
    assert p.request_overhead_sigma == pytest.approx(0.3, abs=0.1)
    assert p.request_overhead_s == pytest.approx(KNOWN.request_overhead_s, rel=0.1)


def test_calibrate_cli_writes_a_loadable_profile(tmp_path: Path) -> None:
    out = tmp_path / "fitted.yaml"
    with SimProcess(SimConfig(port=0, profile=KNOWN, speedup=10, model="m")) as sim:
        r = CliRunner().invoke(
            app,
            [
                "sim",
                "calibrate",
                "--base-url",
                sim.base_url,
                "--model",
                "m",
                "--quick",
                "-o",
                str(out),
            ],
        )
    assert r.exit_code == 0, r.output
    assert "the probe takes about" in r.output and "wrote" in r.output
    got = load_profile(str(out))
    assert got.name == "fitted" and got.calibrated
    # a simulator needs no warm-up (a real server gets 30 s with --quick)
    assert got.calibration is not None and got.calibration["probe"]["warmup_s"] == 0
    # The file carries what the probe read off the server; the fitted timings' accuracy is
    # the in-process test above (a separate simulator process on a busy host adds noise the
    # CLI plumbing does not need to be judged on).
    assert got.max_num_batched_tokens == 2048
    assert got.block_size == 64
    assert got.kv_blocks == 4096
    # A stream that ended before the interference prefill was scheduled once let a plain
    # decode step pass as the mixed step, and the fit put prefill_token_s at 0.
    assert got.prefill_token_s == pytest.approx(KNOWN.prefill_token_s, rel=0.05)
    assert out.read_text().startswith("# agentload simulator profile: fitted")
    # The probe's measurements are kept beside the profile, and a refit from them alone
    # gives the same profile, without a server.
    kept = tmp_path / "fitted.probe.json"
    assert f"kept the probe's measurements in {kept}" in r.output
    again = tmp_path / "again.yaml"
    r = CliRunner().invoke(app, ["sim", "calibrate", "--pool", str(kept), "-o", str(again)])
    assert r.exit_code == 0, r.output
    assert "pooled 1 probe," in r.output and "timing this client" not in r.output
    refit = load_profile(str(again))
    for name in (*PARAMS, "idle_wake_s", "idle_wake_per_s", "coalesce_p", "coalesce_first_p"):
        assert getattr(refit, name) == getattr(got, name), name
    assert refit.max_num_batched_tokens == 2048 and refit.max_num_seqs == got.max_num_seqs
    assert (refit.calibration or {})["pooled"][0]["file"] == "fitted.probe.json"


def test_calibrate_cli_errors_are_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["sim", "calibrate", "--model", "m"])
    assert r.exit_code == 2
    assert "give --base-url and --model" in r.output
    r = runner.invoke(app, ["sim", "calibrate", "--from", str(tmp_path)])
    assert r.exit_code == 2
    assert "has no calls.jsonl" in r.output
    r = runner.invoke(
        app, ["sim", "calibrate", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    )
    assert r.exit_code == 1
    assert r.output.count("\n") == 1, r.output
    assert "did not answer" in r.output
    missing = tmp_path / "gone.probe.json"
    r = runner.invoke(app, ["sim", "calibrate", "--pool", str(missing)])
    assert r.exit_code == 2 and f"--pool: no such file: {missing}" in r.output
    bad = tmp_path / "bad.probe.json"
    bad.write_text("{}")
    r = runner.invoke(app, ["sim", "calibrate", "--pool", str(bad)])
    assert r.exit_code == 2 and f"{bad}: not a probe kept by" in r.output
    r = runner.invoke(
        app, ["sim", "calibrate", "--pool", str(bad), "--base-url", "http://127.0.0.1:9/v1"]
    )
    assert r.exit_code == 2 and "give one of --base-url, --pool" in r.output


async def _http_chunks(base_url: str, tokens: int) -> list[int]:
    """Tokens per HTTP chunk of one stream (chunk framing, not read timing: the count does not
    depend on how busy the machine is)."""
    body = {
        "model": "m",
        "prompt": PromptMaker().text(64),
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    per_chunk: list[int] = []
    seen = 0
    buf = b""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/completions", json=body) as r,
    ):
        async for data, end_of_chunk in r.content.iter_chunks():
            buf += data
            if not end_of_chunk:
                continue
            last = seen
            for line in buf.split(b"\n"):
                if line.startswith(b"data: {"):
                    event = json.loads(line[6:])
                    if event.get("choices"):
                        last = max(last, event["usage"]["completion_tokens"])
            if last > seen:
                per_chunk.append(last - seen)
                seen = last
            buf = b""
    assert seen == tokens
    return per_chunk[1:]  # after the first token


async def _coalescing(profile: Profile, tokens: int = 40) -> tuple[list[int], float]:
    async with SimServer(SimConfig(port=0, profile=profile, model="m", speedup=4)) as sim:
        chunks: list[int] = []
        for _ in range(4):
            chunks += await _http_chunks(sim.base_url, tokens)
        target = Target(sim.base_url, "m", model_times=True)
        async with aiohttp.ClientSession() as http:
            c = await stream_call(http, target, PromptMaker().text(64), tokens)
            tpot = (await model_clock(http, target, c)).tpot()
    assert tpot is not None
    return chunks, tpot


async def test_output_coalescing_groups_tokens_without_changing_their_timing() -> None:
    plain, tpot_plain = await _coalescing(KNOWN)
    assert set(plain) == {1}
    held, tpot_held = await _coalescing(KNOWN.model_copy(update={"coalesce_p": 0.5}))
    # geometric tokens per chunk with p = 0.5: mean 2 (156 tokens: within 1.6-2.5)
    assert 1.6 < statistics.fmean(held) < 2.5
    assert max(held) >= 3
    assert tpot_held == pytest.approx(tpot_plain, rel=1e-6)


def _fidelity_against_itself(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any]]:
    """`sim fidelity` of tiny-cpu where the "real" server is a simulator with that profile:
    errors come from the host only. The command's output and its JSON result."""
    out = tmp_path / "fid.json"
    with SimProcess(SimConfig(port=0, profile="tiny-cpu", model="m")) as real:
        r = CliRunner().invoke(
            app,
            ["sim", "fidelity", "--real", real.base_url, "--model", "m", "--profile", "tiny-cpu",
             *args, "-o", str(out)],
        )  # fmt: skip
    assert r.exit_code in (0, 3), r.output
    return r.output, json.loads(out.read_text())


def test_fidelity_of_a_profile_against_itself(tmp_path: Path) -> None:
    output, result = _fidelity_against_itself(tmp_path, "-w", "decode-heavy", "--seed", "7")
    assert "not calibrated" in output
    assert "| decode-heavy |" in output
    (row,) = result["rows"]
    for metric in ("ttft_p50_s", "tpot_mean_s"):
        assert 0.7 < row["sim"][metric] / row["real"][metric] < 1.4, (metric, row)
    # tiny-cpu: about 0.22 s to first token for 2,000 tokens, 3 ms per token after
    assert 0.12 < row["real"]["ttft_p50_s"] < 0.6
    assert result["salt"] == 7


def test_fidelity_passes_report_medians_and_the_real_spread(tmp_path: Path) -> None:
    output, result = _fidelity_against_itself(
        tmp_path, "-w", "shared-prefix", "--passes", "2", "--seed", "3"
    )
    assert "pass 2 of 2 done" in output and "real spread" in output
    (row,) = result["rows"]
    assert result["passes"] == 2
    spread = row["real_spread"]
    assert set(spread) >= {"ttft_p50_s", "ttft_p90_s", "tpot_mean_s"}
    assert all(0 <= v < 1 for v in spread.values())  # the same simulator, pass after pass
    # the median of two passes is their mean; each pass's figures are kept
    passes = [p["shared-prefix"]["ttft_p50_s"] for p in result["per_pass"]["real"]]
    assert len(passes) == 2 and len(result["per_pass"]["sim"]) == 2
    assert row["real"]["ttft_p50_s"] == pytest.approx(sum(passes) / 2)
    assert 0.7 < row["sim"]["tpot_mean_s"] / row["real"]["tpot_mean_s"] < 1.4
    # every goal metric has its verdict, and the summary line counts them
    lo, hi = row["real_range"]["ttft_p50_s"]
    assert lo == min(passes) and hi == max(passes)
    assert set(row["verdict"]) == {"ttft_p50_s", "ttft_p90_s", "tpot_mean_s"}
    counts = {v: list(row["verdict"].values()).count(v) for v in ("goal", "swings", "off")}
    said = f"goal metrics: {counts['goal']} of 3 within 10%, {counts['swings']} outside it"
    assert said in output
    assert len(result["off"]) == counts["off"]
    # each pass's pace against the other: with two passes the ratios mirror about 1
    real_pace = result["pace"]["real"]
    assert len(real_pace) == 2 and sum(real_pace) == pytest.approx(2.0)
    assert result["pace"]["real_moved"] == pytest.approx(abs(real_pace[0] - real_pace[1]))
    assert f"the real server's pace by pass: {real_pace[0]:.2f} {real_pace[1]:.2f}" in output
    errors = sorted(row["error"][m] for m in ("ttft_p50_s", "ttft_p90_s", "tpot_mean_s"))
    assert result["median_error"] == pytest.approx(errors[1])
    assert f"median error over the goal metrics {100 * errors[1]:+.0f} %" in output
    # each TTFT percentile's shift (one request crossing it), per side: the passes' median
    assert set(row["shift"]) == {"ttft_p50_s", "ttft_p90_s"}
    shifts = [p["shared-prefix"]["ttft_p50_shift"] for p in result["per_pass"]["real"]]
    assert row["shift"]["ttft_p50_s"]["real"] == pytest.approx(sum(shifts) / 2)
    assert all(v >= 0 for s in row["shift"].values() for v in s.values())
    for e in result["band_edges"]:
        assert f"note: shared-prefix TTFT {e['metric'][5:8]} lies between" in output


@pytest.mark.parametrize(
    ("args", "said"), [(["-w", "nope"], "unknown 'nope'"), (["--passes", "0"], "--passes")]
)
def test_fidelity_rejects_bad_arguments(args: list[str], said: str) -> None:
    r = CliRunner().invoke(
        app,
        ["sim", "fidelity", "--real", "http://127.0.0.1:9/v1", "--model", "m", "--profile",
         "tiny-cpu", *args],
    )  # fmt: skip
    assert r.exit_code == 2
    assert said in r.output


def test_fidelity_pools_results_of_servers_at_different_speeds(tmp_path: Path) -> None:
    # One profile measured beside three "real" servers: one 25 % faster than it, one as it,
    # one 25 % slower (as a real server moves between starts). Alone, the fast and slow ones
    # put the profile off by their speed; pooled, it is held against the median server.
    files = []
    for speedup in (1.25, 1.0, 0.8):
        out = tmp_path / f"fid-{speedup}.json"
        with SimProcess(SimConfig(port=0, profile="tiny-cpu", model="m", speedup=speedup)) as real:
            r = CliRunner().invoke(
                app,
                ["sim", "fidelity", "--real", real.base_url, "--model", "m", "--profile",
                 "tiny-cpu", "-w", "shared-prefix", "--seed", "5", "-o", str(out)],
            )  # fmt: skip
        assert r.exit_code in (0, 3), r.output
        files.append(out)
    alone = [json.loads(f.read_text()) for f in files]
    pooled_out = tmp_path / "pooled.json"
    args = [a for f in files for a in ("--pool", str(f))]
    r = CliRunner().invoke(app, ["sim", "fidelity", *args, "-o", str(pooled_out)])
    got = json.loads(pooled_out.read_text())
    assert r.exit_code == (0 if got["within_goal"] else 3), r.output
    (row,) = got["rows"]
    for m in ("ttft_p50_s", "ttft_p90_s", "tpot_mean_s"):
        reals = sorted(res["rows"][0]["real"][m] for res in alone)
        assert row["real"][m] == reals[1] and row["real_range"][m] == [reals[0], reals[2]]
        assert row["sim"][m] == statistics.median(res["rows"][0]["sim"][m] for res in alone)
    fast, usual, slow = got["pooled"]
    assert fast["median_error"] > 0.12 and slow["median_error"] < -0.1
    assert abs(got["median_error"]) < min(fast["median_error"], -slow["median_error"])
    assert fast["pace"] < usual["pace"] < slow["pace"]
    assert "3 results of profile tiny-cpu pooled, each one vote:" in r.output
    assert f"  {files[0]}: {fast['within_goal']} of 3 goal metrics within 10%" in r.output
    assert "the real server's pace by result: " in r.output
    assert "inside the range the real server covered between the results" in r.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--model", "m", "--profile", "tiny-cpu"], "give --real (or --pool RESULT_JSON ...)"),
        ([], "give --real, --model, --profile"),
        (["--pool", "{x}", "--pool", "{x}", "--real", "http://127.0.0.1:9/v1", "--passes", "2"],
         "--pool combines results already measured: drop --real, --passes"),
        (["--pool", "{missing}", "--pool", "{x}"], "--pool: cannot read"),
        (["--pool", "{bad}", "--pool", "{x}"], "--pool: {bad}: not JSON"),
        (["--pool", "{x}"], "--pool: pooling needs two or more fidelity results"),
    ],
)  # fmt: skip
def test_fidelity_pool_errors_name_what_to_change(
    tmp_path: Path, args: list[str], said: str
) -> None:
    paths = {"x": tmp_path / "x.json", "missing": tmp_path / "missing.json",
             "bad": tmp_path / "bad.json"}  # fmt: skip
    paths["x"].write_text(json.dumps({"profile": "p", "rows": []}))
    paths["bad"].write_text("{not json")
    fill = {k: str(v) for k, v in paths.items()}
    r = CliRunner().invoke(app, ["sim", "fidelity", *(a.format(**fill) for a in args)])
    assert r.exit_code == 2
    assert said.format(**fill) in r.output


def test_a_wall_clock_calibration_takes_the_serving_overhead_off(tmp_path: Path) -> None:
    out = tmp_path / "fitted.yaml"
    with SimProcess(SimConfig(port=0, profile=KNOWN, speedup=10, model="m")) as sim:
        r = CliRunner().invoke(
            app,
            ["sim", "calibrate", "--base-url", sim.base_url, "--model", "m", "--quick",
             "--wall-clock", "-o", str(out)],
        )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "timing this client against a simulator" in r.output
    got = load_profile(str(out))
    over = (got.calibration or {})["serving_overhead"]
    assert over["requests"] == OVERHEAD_REQUESTS and 0 < over["median_s"] < 0.05
    assert f"less {1e3 * over['median_s']:.2f} ms the simulator adds by serving it" in r.output
    assert got.request_overhead_s == pytest.approx(
        max(0.0, over["request_overhead_fitted_s"] - over["median_s"]), rel=1e-3, abs=1e-9
    )


async def test_a_simulator_that_will_not_start_keeps_the_probe(monkeypatch: Any) -> None:
    from agentload.calibration import calibrate as calibrate_module

    async def broken(*args: Any) -> list[float]:
        raise RuntimeError("agentload sim exited with status 1 during startup")

    monkeypatch.setattr(calibrate_module, "serving_overhead", broken)
    async with SimServer(SimConfig(port=0, profile=KNOWN, speedup=10, model="m")) as sim:
        lines: list[str] = []
        result = await calibrate(
            Target(sim.base_url, "m"),
            name="fitted",
            plan=ProbePlan.quick(),
            wall_clock=True,
            say=lines.append,
        )
    assert any("could not time a simulator" in line for line in lines), lines
    cal = result.profile.calibration or {}
    assert "serving_overhead" not in cal and cal["clock"] == "wall"
    assert result.profile.request_overhead_s > 0  # the fitted value, kept


async def _ttfts(profile: Profile) -> tuple[float, float]:
    """Median wall and model TTFT of short requests to a simulator with `profile`."""
    pairs = await short_request_ttfts(profile, "m", None, PromptMaker(None, 11))
    return statistics.median(w for w, _ in pairs), statistics.median(m for _, m in pairs)


async def test_the_simulators_serving_overhead_comes_off_the_fitted_front_end() -> None:
    diffs = await serving_overhead(KNOWN, "m", None, PromptMaker(None, 5))
    assert len(diffs) == OVERHEAD_REQUESTS
    # the simulator never sends a token before its model time, and this client reads it soon
    assert all(0 < d < 0.05 for d in diffs), diffs
    over = statistics.median(diffs)
    corrected = without_overhead(KNOWN, diffs)
    note = (corrected.calibration or {})["serving_overhead"]
    assert note["median_s"] == pytest.approx(over, abs=1e-6)
    assert note["request_overhead_fitted_s"] == KNOWN.request_overhead_s
    assert corrected.request_overhead_s == pytest.approx(KNOWN.request_overhead_s - over, rel=1e-3)
    # What it is for: a fitted profile's TTFT is what the client saw of the real server; the
    # corrected profile's model time is that less the simulator's own serving overhead, so
    # served, it gives the client the fitted TTFT. Checked on the simulator's model clock: a
    # wall-clock comparison of a millisecond is the machine's load, not the correction (the
    # wall-clock figures: benchmarks/sim_calibration.py).
    _, model_fitted = await _ttfts(KNOWN)
    _, model_corrected = await _ttfts(corrected)
    assert model_fitted - model_corrected == pytest.approx(over, rel=0.05, abs=2e-4), (
        model_fitted,
        model_corrected,
        over,
    )


def test_the_serving_overhead_never_makes_the_front_end_negative() -> None:
    small = KNOWN.model_copy(update={"request_overhead_s": 0.0005})
    assert without_overhead(small, [0.0008, 0.0009, 0.0007]).request_overhead_s == 0.0


def _slower(p: Profile, k: float) -> Profile:
    """`p` with every cost `k` times its own (the idle cap is a length of time, not a cost)."""
    costs = [f for f in Profile.model_fields if f.endswith("_s") and f != "idle_wake_cap_s"]
    return p.model_copy(update={f: k * getattr(p, f) for f in costs})


async def test_a_round_of_the_probe_on_a_slower_server_is_named() -> None:
    plan = ProbePlan.quick()
    plan.repeats = 3
    plan.idle_pause_s = 0.0  # neither pattern is needed here; both take wall time
    plan.first_chunk_streams = 0
    async with SimServer(SimConfig(port=0, profile=KNOWN, speedup=10, model="m")) as sim:
        assert sim.sim is not None
        app_ = sim.sim
        lines: list[str] = []

        def say(line: str) -> None:
            # The server runs 30 % slower through the second round only.
            if "round 2/3" in line and app_.profile is not slow:
                app_.profile = app_.engine.p = slow
            elif "round 3/3" in line:
                app_.profile = app_.engine.p = KNOWN
            lines.append(line)

        slow = _slower(KNOWN, 1.3)
        result = await calibrate(Target(sim.base_url, "m"), name="fitted", plan=plan, say=say)
    paces = (result.profile.calibration or {})["pace"]
    # Every observation ran 1.3 times as long in round 2 and alike in rounds 1 and 3.
    assert paces["rounds"] == pytest.approx([1.0, 1.3, 1.0], abs=0.02)
    assert paces["moved"] == pytest.approx(0.3, abs=0.02)
    (note,) = [line for line in lines if "moved between the probe's rounds" in line]
    assert "1.00 1.30 1.00 (apart by 30 %)" in note and "--warmup" not in note
    assert any("pace of the probe's rounds 1.00 1.30 1.00" in s for s in summary_lines(result))


def _steps_slower(p: Profile, k: float) -> Profile:
    """`p` with the engine's step costs `k` times its own and its front end as it was."""
    steps = [f for f in PARAMS if f not in ("request_overhead_s", "frontend_token_s")]
    return p.model_copy(update={f: k * getattr(p, f) for f in steps})


async def test_pooled_probes_fit_the_server_as_it_usually_runs(tmp_path: Path) -> None:
    # Three probes of one server whose steps ran 10 % fast, as usual and 30 % slow (as a
    # real server moves between starts): each alone fits its own speed, the pool the usual.
    plan = ProbePlan.quick()
    plan.idle_pause_s = 0.0  # not needed here, and it takes wall time
    plan.first_chunk_streams = 0
    kept = []
    for k in (0.9, 1.0, 1.3):
        served = _steps_slower(KNOWN, k)
        async with SimServer(SimConfig(port=0, profile=served, speedup=10, model="m")) as sim:
            path = tmp_path / f"x{k}.probe.json"
            alone = await calibrate(
                Target(sim.base_url, "m"), name=f"x{k}", plan=plan, save_probe=path
            )
        assert alone.profile.decode_seq_s == pytest.approx(served.decode_seq_s, rel=0.05)
        kept.append(path)
    lines: list[str] = []
    c = await pool(kept, name="pooled", say=lines.append)
    for name in (*PARAMS, "idle_wake_s"):
        assert getattr(c.profile, name) == pytest.approx(getattr(KNOWN, name), rel=0.05), name
    paces = [q["pace"] for q in (c.profile.calibration or {})["pooled"]]
    # the middle probe is every quantity's median; the others' step costs moved, not their
    # front end, so their TTFTs moved less than k
    assert paces[1] == 1.0 and 0.9 <= paces[0] < 1.0 < paces[2] <= 1.3
    assert any("the server ran at different speeds in different probes" in s for s in lines)
    assert any(
        f"pace of the pooled probes {paces[0]:.2f} 1.00 {paces[2]:.2f}" in s
        for s in summary_lines(c)
    )


SHIPPED_PROBES = Path(__file__).resolve().parents[2] / "benchmarks/data/vllm-cpu-tiny"


async def test_the_shipped_profile_is_its_kept_probes_refitted() -> None:
    # The probes vllm-cpu-tiny was pooled from are kept in the repository: refitting them
    # gives the shipped profile, so a change to the fit shows here before it ships unmeasured.
    shipped = load_profile("vllm-cpu-tiny")
    cal = shipped.calibration or {}
    probes = sorted(SHIPPED_PROBES.glob("*.probe.json"))
    assert [p.name for p in probes] == [q["file"] for q in cal["pooled"]]
    got = await pool(probes, name="vllm-cpu-tiny", max_num_seqs=128)
    # Only the simulator's serving overhead is timed anew (on this host), and comes off the
    # fitted front end; everything else is the probes' alone.
    fitted = [*PARAMS, "idle_wake_s", "idle_wake_per_s", "coalesce_p", "coalesce_per_seq",
              "coalesce_first_p", "coalesce_first_run"]  # fmt: skip
    for name in fitted:
        if name != "request_overhead_s":
            want = getattr(shipped, name)
            assert getattr(got.profile, name) == pytest.approx(want, rel=2e-3), name
    refit = got.profile.calibration or {}
    for key in ("request_overhead_busy_s", "sigma", "arrivals", "consistent"):
        assert refit["busy_start"][key] == cal["busy_start"][key], key
    assert refit["held"] == cal["held"] and refit["fit"] == cal["fit"]
    assert [q["pace"] for q in refit["pooled"]] == [q["pace"] for q in cal["pooled"]]
    overhead = refit["serving_overhead"]["median_s"]
    assert shipped.request_overhead_s + cal["serving_overhead"]["median_s"] == pytest.approx(
        got.profile.request_overhead_s + overhead, abs=2e-5
    )


def _generated(base_url: str) -> int:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/sim/stats") as r:
        return int(json.loads(r.read())["generation_tokens"])


@pytest.mark.parametrize("warmup", [0.0, 0.5])
def test_fidelity_warms_the_real_server_up_unrecorded(tmp_path: Path, warmup: float) -> None:
    out = tmp_path / "fid.json"
    with SimProcess(SimConfig(port=0, profile="instant", model="m")) as real:
        r = CliRunner().invoke(
            app,
            ["sim", "fidelity", "--real", real.base_url, "--model", "m", "--profile", "instant",
             "-w", "decode-heavy", "--warmup", str(warmup), "-o", str(out)],
        )  # fmt: skip
        generated = _generated(real.base_url)
    assert r.exit_code in (0, 3), r.output
    result = json.loads(out.read_text())
    warmed = result["warmup"]["workloads"]
    assert result["warmup"]["seconds"] == warmup
    # decode-heavy: six requests of 64 tokens per run, the measured one and each warm-up's
    assert generated == 6 * 64 * (1 + warmed)
    if warmup:
        assert warmed >= 1 and "warm-up: decode-heavy" in r.output
    else:
        assert warmed == 0 and "warm-up" not in r.output
