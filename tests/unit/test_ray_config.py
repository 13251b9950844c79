"""The `ray:` configuration key and the --ray flag."""

from __future__ import annotations

import pytest

from agentload.config import ConfigError, build_config, config_to_dict
from agentload.redact import redact


def test_ray_takes_an_address_alone_or_a_mapping() -> None:
    assert build_config(data={}).ray is None
    cfg = build_config(data={"ray": "10.0.0.1:6379"})
    assert cfg.ray is not None and cfg.ray.address == "10.0.0.1:6379"
    assert cfg.ray.cpus_per_worker == 1.0 and cfg.ray.namespace == "agentload"
    cfg = build_config(data={"ray": {"address": "auto", "cpus_per_worker": 0.5}})
    assert cfg.ray is not None and cfg.ray.cpus_per_worker == 0.5


def test_the_flag_sets_the_address() -> None:
    cfg = build_config(data={}, overrides={"ray.address": "auto"}, flags={"ray.address": "--ray"})
    assert cfg.ray is not None and cfg.ray.address == "auto"


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"ray": {"address": ""}}, "ray.address"),
        ({"ray": {"address": "auto", "cpus_per_worker": 0}}, "ray.cpus_per_worker"),
        ({"ray": {"address": "auto", "workers": 3}}, "ray.workers"),
    ],
)
def test_bad_ray_settings_name_the_field(bad: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        build_config(data=bad)


def test_a_saved_ray_config_loads_back() -> None:
    cfg = build_config(data={"ray": {"address": "10.0.0.1:6379", "start_timeout_s": 30}})
    again = build_config(data=redact(config_to_dict(cfg)))
    assert again.ray == cfg.ray
