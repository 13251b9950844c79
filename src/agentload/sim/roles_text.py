"""Wording of the simulated agent and user: phrases, filler and small text helpers.

Kept apart from the decision logic in :mod:`agentload.sim.roles`. Filler sentences carry no
digits, no field names (id, date, order, ...) and no request or confirmation phrases, so
padding a reply never changes what the other side reads into it.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from typing import Any

from agentload.sim.tokenizer import split_pieces

STOP = "###STOP###"

# --- the agent's phrases -----------------------------------------------------------------------

GREETINGS = (
    "Hello, and thank you for reaching out.",
    "Hi there, thanks for getting in touch.",
    "Good day, and thank you for contacting us.",
)
ASK_TEMPLATES = (
    "Could you please share {what}?",
    "To look into this, could you please provide {what}?",
    "May I have {what}, please?",
)
DETAILS_ASK = (
    "Could you describe exactly what you would like me to do, with all the details you have?"
)
CHECKIN = "Thanks, I have the records in front of me now."
CLARIFY = "Before I answer, I want to be sure I understood your request correctly."
CLARIFY_QUESTION = "You are asking me about exactly what you described, is that right? (yes/no)"
CONFIRM_QUESTIONS = (
    "Shall I go ahead with this? (yes/no)",
    "Do you confirm that I should proceed? (yes/no)",
    "Would you like me to proceed with this change? (yes/no)",
)
READ_PREFACES = (
    "Let me look that up for you.",
    "One moment while I check our records.",
    "Let me pull up the details.",
)
WRITE_PREFACES = ("I'll make that change now.", "Processing this for you now.")
DECLINED = "Understood, I will not make that change."
ANYTHING_ELSE = "Is there anything else I can help you with today?"
CLOSING = "You're very welcome. Have a wonderful day, and take care."
FOLLOWUP_ANSWERS = (
    "Yes, everything is settled on our side.",
    "Of course, here is a quick recap.",
    "Certainly, let me repeat the essentials.",
)

ACK_FILLER = (
    "Thank you for your patience while I look into this.",
    "I appreciate you taking the time to explain the situation.",
    "I understand how important this is to you.",
    "I'm glad to help you with this today.",
    "I'm sorry for any inconvenience this may have caused.",
    "Thanks for bearing with me for a moment.",
    "I want to make sure we get this exactly right for you.",
)
CLOSE_FILLER = (
    "I want to make sure everything is handled correctly on your behalf.",
    "Our goal is to resolve this as smoothly as possible for you.",
    "I'll keep things as simple as I can on my side.",
    "Please let me know right away if anything looks off to you.",
    "I'll make sure nothing else on your profile is affected by this.",
    "Everything we discuss here is noted for future reference.",
    "You should see the update reflected in your profile shortly.",
    "We value your trust and want this to go well for you.",
    "I'll stay with you until everything is sorted out.",
)
REASONING_FILLER = (
    "I should follow the policy step by step and not skip any checks.",
    "Nothing in the conversation so far contradicts the plan.",
    "I need to keep the customer informed without overwhelming them.",
    "The policy requires facts from the tools rather than assumptions.",
)

# --- the user's phrases ------------------------------------------------------------------------

YES_REPLIES = ("Yes, please go ahead.", "Yes, that's right. Please proceed.", "yes")
NO_INFO = "Sorry, I don't have that information."
PUSHBACK = "Are you sure? Is there really nothing you can do for me?"
FOLLOWUPS = (
    "Thanks. Just to be sure, is everything settled now?",
    "Okay. Could you repeat the key details once more so I can note them down?",
    "Great, and will that be reflected on my side right away?",
)

# --- detectors (shared by both sides, tolerant of a real model's wording) ----------------------

CONFIRM_REQUEST_RE = re.compile(
    r"\(yes/no\)|\bdo you confirm\b|\bplease confirm\b|\bcan you confirm\b"
    r"|\b(shall|should|may) i (go ahead|proceed)\b|\bwould you like me to (go ahead|proceed)\b"
    r"|\bwould you like me to proceed\b|\bconfirm (that )?(you|i should)\b",
    re.IGNORECASE,
)
PROCEED_RE = re.compile(r"\(yes/no\)|\bproceed\b|\bgo ahead\b", re.IGNORECASE)
INFO_REQUEST_RE = re.compile(
    r"\b(could|can|would) you (please )?(share|provide|give|tell|send|confirm|let me know)\b"
    r"|\bplease (share|provide|tell|send|give)\b|\bmay i (have|ask)\b|\bwhat(?: is|'s) your\b"
    r"|\bi(?:'ll| will) need\b|\bi need your\b|\bcould you (please )?describe\b",
    re.IGNORECASE,
)
DETAILS_REQUEST_RE = re.compile(
    r"\bdescribe\b|\bmore details\b|\ball the details\b|\bwhat (exactly )?would you like\b"
    r"|\bhow can i help\b",
    re.IGNORECASE,
)
YES_RE = re.compile(
    r"^\W*(yes|yeah|yep|yup|sure|ok|okay|correct|confirm(ed)?|please do|please proceed|go ahead"
    r"|that'?s (right|correct)|absolutely|definitely|do it)\b",
    re.IGNORECASE,
)
NO_RE = re.compile(r"^\W*(no|nope|don'?t|do not|wait|stop)\b", re.IGNORECASE)


def is_confirm_request(text: str) -> bool:
    return bool(CONFIRM_REQUEST_RE.search(text))


def is_yes(text: str) -> bool:
    return bool(YES_RE.search(text.strip())) and not NO_RE.search(text.strip())


def is_no(text: str) -> bool:
    return bool(NO_RE.search(text.strip()))


# --- field labels ------------------------------------------------------------------------------

_NICE = {
    "user_id": "your user id",
    "name": "your full name",
    "email": "the email address on your profile (email)",
    "zip": "the zip code on your profile",
    "reason": "the reason for this request",
    "payment": "the payment method you would like to use",
    "payment_method": "the payment method you would like to use",
    "refund_to": "where you would like the refund to go (refund to)",
    "date_of_birth": "your date of birth",
}


def label(key: str) -> str:
    """How a known-info key is named in questions; the user side looks for this text."""
    return key.replace("_", " ")


def what(key: str) -> str:
    """The noun phrase the agent asks with; it always contains ``label(key)``."""
    return _NICE.get(key, f"the {label(key)}")


def join_words(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


_SECOND_TO_FIRST = (
    (re.compile(r"\byou are\b", re.IGNORECASE), "I am"),
    (re.compile(r"\byou were\b", re.IGNORECASE), "I was"),
    (re.compile(r"\byourself\b", re.IGNORECASE), "myself"),
    (re.compile(r"\byours\b", re.IGNORECASE), "mine"),
    (re.compile(r"\byour\b"), "my"),
    (re.compile(r"\bYour\b"), "My"),
    (
        re.compile(r"(^|[.!?]\s+|\bthen:?\s+|\bbecause\s+|\bif\s+|\band\s+|\bso\s+|,\s+)you\b"),
        r"\1I",
    ),
    (
        re.compile(
            r"\byou(?=(?:\s+(?:also|only|just|still|now|already|no longer|really))?\s+"
            r"(?:want|wanted|need|needed|have|had|will|would|can|could|do|did|expect|"
            r"moved|booked|bought|checked|paid|ordered|received|got|prefer|plan|think|"
            r"know|asked|used|changed|are|were)\b)"
        ),
        "I",
    ),
    (re.compile(r"\bYou\b"), "I"),
    (re.compile(r"\byou\b"), "me"),
)


def first_person(text: str) -> str:
    """The scenario's second-person wording as the customer would say it."""
    for pattern, repl in _SECOND_TO_FIRST:
        text = pattern.sub(repl, text)
    return text


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_RE.split(text.strip()) if s]


def restated(instructions: str) -> str:
    """The instructions, first person, without the lines that only steer the simulation."""
    keep = [
        s
        for s in sentences(instructions)
        if not re.search(r"\bagent\b|^bring up\b|^if |^when ", s, re.IGNORECASE)
    ]
    return first_person(" ".join(keep)) or first_person(instructions)


# --- values ------------------------------------------------------------------------------------

_AMOUNT_RE = re.compile(r"\d{1,5}(\.\d\d)?")


def say_output(value: str) -> str:
    """A required output as the agent says it: short numbers read as amounts."""
    return f"${value}" if _AMOUNT_RE.fullmatch(value) else value


def say_value(value: Any) -> str:
    if isinstance(value, str):
        return value or "(empty)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def describe_action(name: str, arguments: dict[str, Any], *, full: bool) -> str:
    """E.g. ``cancel reservation (reservation id 86W3TJ)``; ``full`` lists every argument."""
    words = name.replace("_", " ")
    items = list(arguments.items())
    if not full:
        items = [(k, v) for k, v in items if k.endswith("_id") and isinstance(v, str)][:1]
    if not items:
        return words
    return f"{words} ({'; '.join(f'{label(k)}: {say_value(v)}' for k, v in items)})"


def norm(text: str) -> str:
    """Case and thousands separators ignored, as the grader reads replies."""
    return re.sub(r"\s+", " ", re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower()).replace("_", " "))


# --- length ------------------------------------------------------------------------------------


def n_tokens(text: str) -> int:
    return len(split_pieces(text))


def padded(
    core: Sequence[str],
    rng: random.Random,
    target: int,
    *,
    lead: Iterable[str] = (),
    avoid: str | None = None,
    tail: Sequence[str] = (),
) -> str:
    """``lead + core + filler + tail`` grown with filler to about ``target`` tokens.

    Sentences containing ``avoid`` (normalised) are dropped: an agent that forgets a required
    output must not say it by accident in a filler or a summary.
    """

    def ok(s: str) -> bool:
        return avoid is None or norm(avoid) not in norm(s)

    head = [s for s in lead if ok(s)]
    body = [s for s in core if ok(s)]
    end = [s for s in tail if ok(s)]
    count = sum(n_tokens(s) + 1 for s in head + body + end)
    pool = [s for s in CLOSE_FILLER if ok(s)]
    acks = [s for s in ACK_FILLER if ok(s)]
    rng.shuffle(pool)
    rng.shuffle(acks)
    extra: list[str] = []
    for i, s in enumerate(pool):
        if count >= target:
            break
        if i == 0 and acks:  # an acknowledgement reads best before the substance
            head.append(acks[0])
            count += n_tokens(acks[0]) + 1
            if count >= target:
                break
        extra.append(s)
        count += n_tokens(s) + 1
    return " ".join(head + body + extra + end)
