"""Redaction: PII and secrets out of every string of a failure record, before anything is stored.

`redact(record)` walks the record recursively (message text, tool-call arguments, tool results, errors, ids,
dict keys too) and replaces what it finds with a typed placeholder. The `RedactionReport` it returns holds
counts only, by kind and by rule, never the values.

| placeholder | rule | what it finds |
| --- | --- | --- |
| `[SECRET]` | `private_key` | PEM `-----BEGIN ... PRIVATE KEY-----` blocks (to the end of the text if cut off) |
| `[SECRET]` | `url_credentials` | `user:password` in a URL: `postgres://app:pw@db/x` |
| `[API_KEY]` | `jwt` | JSON Web Tokens `eyJ....eyJ....signature` |
| `[API_KEY]` | `anthropic_key` | `sk-ant-...` |
| `[API_KEY]` | `openai_key` | `sk-...`, `sk-proj-...`, `sk-svcacct-...`, `sk-admin-...` (20+ chars with a digit) |
| `[API_KEY]` | `aws_access_key_id` | `AKIA`, `ASIA`, ... + 16 upper-case letters or digits |
| `[API_KEY]` | `github_token` | `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` + 36 characters; `github_pat_...` |
| `[API_KEY]` | `slack_token` | `xoxa-`, `xoxb-`, `xoxp-`, `xoxr-`, `xoxs-` ... |
| `[API_KEY]` | `google_api_key` | `AIza` + 35 characters |
| `[API_KEY]` | `stripe_key` | `sk_live_`, `rk_live_`, `sk_test_`, `rk_test_` ... |
| `[API_KEY]` | `bearer_token` | the credential after `Bearer` or `Basic` (12+ characters) |
| `[SECRET]` | `aws_secret_key` | a 40-character key a few words after `aws ... secret` |
| `[SECRET]` | `secret_assignment` | the value in `password=...`, `api_key: ...`, `"client_secret": "..."` |
| `[SECRET]` | `sensitive_key` | a string or number under a sensitive key: `{"password": "hunter2"}` |
| `[EMAIL]` | `email` | `local@domain.tld` |
| `[CREDIT_CARD]` | `credit_card` | 13-19 digits, first digit 2-6 (card networks), valid Luhn sum; also a JSON int |
| `[IP]` | `ipv6`, `ipv4` | addresses Python's `ipaddress` accepts (with the decisions below) |
| `[PHONE]` | `phone_international` | `+`, a country code and 8-15 digits in all: `+44 20 7946 0958` |
| `[PHONE]` | `phone_us` | `(202) 555-0143`, `202-555-0143`, `202.555.0143`, `1-202-555-0143` |
| `[PHONE]` | `phone_local` | a 7-digit `555-0143` right after `phone`, `call (me at)`, `tel`, `mobile`, `fax`, ... |
| `[SECRET]` | `high_entropy` | tokens that look random (below) |
| `[NAME]` | `name` | only what an optional `NameDetector` finds (below) |

A key is sensitive when its last words are a credential word (`password`, `secret`, `token`, `api_key`,
`authorization`, ...; see `is_sensitive_key`). Card numbers may be contiguous or grouped 4-4-4-4 (one space or
dash between groups, the same throughout) or 4-6-5.

Rules run in the order of the table, each on the output of the one before, so a key inside a JWT is counted
once, and no rule matches a placeholder.

**High-entropy tokens.** A run of 20+ characters of `A-Z a-z 0-9 + / = _ -` is split at `/` and `=` (so a URL
path or `name=value` is judged part by part) and a part is a secret when it

- is hex (`0-9a-f`, with a letter and a digit) of 32+ characters (API keys, session ids, SHA digests); or
- has a letter and a digit; a piece between `-`/`_` is jumbled, with 3+ switches between lower case, upper
  case and digits (a capital starting a word is no switch: `gpt-4o-mini-2024-07-18` and
  `take_2d_axis0_int8_float64` have none such); its case/digit segments (`Olmo3RotaryEmbedding` ->
  `Olmo 3 Rotary Embedding`) average under 3 characters; and its Shannon entropy is at least
  `0.8 * log2(min(length, 32))` bits per character.

Measured on random tokens (5,000 per cell) and on the 10,627 `/`-separated parts of 20+ characters with a
letter and a digit among identifiers, comments and doc links of this project's virtualenv (torch,
transformers, pandas, ...), which is the hardest ordinary text for this rule:

| random token | 20 chars | 24 | 32 | 40 | 64 |
| --- | --- | --- | --- | --- | --- |
| `A-Za-z0-9` | 96% | 97% | 99% | 99.7% | 100% |
| base64 / base64url | 96% | 98% | 99% | 99.8% | 100% |
| `a-z0-9` only | 80% | 74% | 81% | 79% | 85% |

and 0.7% of those identifiers are redacted (76 of 10,691; e.g. `Qwen2_5OmniDiTConfig`, `MobileNetV2DeepLabV3Plus`,
and Google Drive file ids). Identifiers without a digit, words, snake_case and kebab-case names made of plain
pieces (model ids), numbers and dates are never touched by this rule. Vendor keys are caught by
their own rules above, whatever their entropy.

**Decisions.**

- UUIDs (`8-4-4-4-12` hex) are kept: they are the request/session ids that tie a failure to its source.
- Hex shorter than 32 characters is kept (task ids, short commit hashes, colours).
- A dotted quad is an IPv4 address: bare `1.2.3.4` becomes `[IP]`, since a log cannot tell it from an address
  and leaking an address costs more than losing a version number. It is kept when it reads as a version:
  `v1.2.3.4`, `version 1.2.3.4`, `==1.2.3.4`, `pkg@1.2.3.4`. Three-part versions (`1.2.3`) never match.
- IPv6 needs three groups with digits (`2001:db8::1`); `::1`, `fe80::1` and `a[::2]` slicing are kept, and
  so are times (`09:26:53`) and MAC addresses, which `ipaddress` rejects.
- National phone formats other than the US need a leading `+` and country code; bare digit runs (order ids,
  epoch timestamps) are never phones.
- Values of sensitive keys are replaced only when they are strings or numbers, so a JSON Schema property
  called `password` keeps its `{"type": "string"}`.

**Names.** Regular expressions cannot find names. A `NameDetector` (anything with `find_names(text)`
returning `(start, end)` spans; `failures.names`, which ships `KnownNamesDetector` and `PresidioNameDetector`)
plugs in through `RedactionConfig(name_detector=...)`; each span it finds becomes `[NAME]`.
`RedactionConfig()` has no name detector by default, so names are kept.
"""

from __future__ import annotations

import collections
import hashlib
import ipaddress
import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from failures.names import NameDetector

EMAIL = "EMAIL"
PHONE = "PHONE"
CREDIT_CARD = "CREDIT_CARD"
IP = "IP"
API_KEY = "API_KEY"
SECRET = "SECRET"
NAME = "NAME"
KINDS = (EMAIL, PHONE, CREDIT_CARD, IP, API_KEY, SECRET, NAME)
PLACEHOLDER = re.compile(r"\[(?:" + "|".join(KINDS) + r")\]")


@dataclass(frozen=True)
class RedactionConfig:
    """Thresholds of the high-entropy rule, and the optional name detector.

    Args:
        min_secret_chars: shortest token the high-entropy rule judges.
        entropy_factor: a token needs at least `entropy_factor * log2(min(length, 32))` bits per character.
        max_mean_segment: a token whose case/digit segments average this long or longer reads as words.
        min_jumbled_switches: case/digit switches that make a `-`/`_`-separated piece look random.
        min_hex_secret_chars: shortest hex token treated as a secret.
        name_detector: finds names to replace with `[NAME]`; None (the default) redacts no names.

    Raises:
        ValueError: a threshold out of range; the message gives the value and the range.

    Example:
        >>> RedactionConfig(min_secret_chars=24).min_secret_chars
        24
    """

    min_secret_chars: int = 20
    entropy_factor: float = 0.8
    max_mean_segment: float = 3.0
    min_jumbled_switches: int = 3
    min_hex_secret_chars: int = 32
    name_detector: NameDetector | None = None

    def __post_init__(self) -> None:
        if self.min_secret_chars < 8:
            raise ValueError(
                f"min_secret_chars ({self.min_secret_chars}) must be at least 8: shorter tokens are words"
            )
        if not 0 < self.entropy_factor <= 1:
            raise ValueError(f"entropy_factor ({self.entropy_factor}) must be in (0, 1]")
        if self.max_mean_segment <= 1:
            raise ValueError(f"max_mean_segment ({self.max_mean_segment}) must be above 1")
        if self.min_jumbled_switches < 1:
            raise ValueError(f"min_jumbled_switches ({self.min_jumbled_switches}) must be at least 1")
        if self.min_hex_secret_chars < 16:
            raise ValueError(f"min_hex_secret_chars ({self.min_hex_secret_chars}) must be at least 16")
        if self.name_detector is not None and not isinstance(self.name_detector, NameDetector):
            raise ValueError(
                f"name_detector ({type(self.name_detector).__name__}) has no find_names(text) method; "
                "pass a NameDetector such as KnownNamesDetector or PresidioNameDetector"
            )


@dataclass(frozen=True)
class RedactionReport:
    """How much was redacted: counts by placeholder kind and by rule, never the values.

    Example:
        >>> report = redact_text("mail ann@example.com")[1] + redact_text("call +1 202 555 0143")[1]
        >>> report.counts, report.total
        ({'EMAIL': 1, 'PHONE': 1}, 2)
    """

    counts: dict[str, int] = field(default_factory=dict)
    rules: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Values replaced, all kinds together."""
        return sum(self.counts.values())

    def __add__(self, other: RedactionReport) -> RedactionReport:
        return RedactionReport(_add_counts(self.counts, other.counts), _add_counts(self.rules, other.rules))

    def __str__(self) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in self.counts.items()) or "nothing redacted"


def _add_counts(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    total = collections.Counter(a)
    total.update(b)
    return {key: total[key] for key in sorted(total, key=_kind_order) if total[key]}


def _kind_order(key: str) -> tuple[int, str]:
    return (KINDS.index(key) if key in KINDS else len(KINDS), key)


class _Tally:
    """Counts while a record is redacted."""

    def __init__(self) -> None:
        self.kinds: collections.Counter[str] = collections.Counter()
        self.rules: collections.Counter[str] = collections.Counter()

    def add(self, rule: str, kind: str, n: int = 1) -> None:
        if n:
            self.kinds[kind] += n
            self.rules[rule] += n

    def report(self) -> RedactionReport:
        return RedactionReport(_add_counts(self.kinds, {}), _add_counts(self.rules, {}))


# --- sensitive keys --------------------------------------------------------------------------------------------

_SENSITIVE_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "api_key",
    "access_key",
    "secret_key",
    "private_key",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "session_token",
    "authorization",
    "credential",
    "credentials",
    "cookie",
)


def is_sensitive_key(name: str) -> bool:
    """Whether a field called `name` holds a credential: its last words are one of the sensitive words.

    Args:
        name: a mapping key or the left side of an assignment (`db_password`, `X-Api-Key`, `clientSecret`).

    Returns:
        True for `password`, `db_password`, `x-api-key`, `client_secret`, `access_token`, `Authorization`;
        False for `max_tokens`, `token_count`, `token_type`, `password_hint`.

    Example:
        >>> is_sensitive_key("X-Api-Key"), is_sensitive_key("max_tokens")
        (True, False)
    """
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().replace("-", "_").replace(" ", "_")
    return any(snake == word or snake.endswith("_" + word) for word in _SENSITIVE_WORDS)


# --- the rules ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    """A regular expression whose `value` (or `bare`) group, else whole match, becomes the placeholder.

    `accept`, when given, vets each match (a Luhn check, a valid address) and keeps the text when it says no.
    """

    name: str
    kind: str
    pattern: re.Pattern[str]
    accept: Callable[[re.Match[str]], bool] | None = None

    def apply(self, text: str, tally: _Tally) -> str:
        def replace(match: re.Match[str]) -> str:
            if self.accept is not None and not self.accept(match):
                return match.group(0)
            group = next(
                (g for g in ("value", "bare") if g in self.pattern.groupindex and match.group(g) is not None), 0
            )
            start, end = match.start(group) - match.start(), match.end(group) - match.start()
            whole = match.group(0)
            tally.add(self.name, self.kind)
            return whole[:start] + f"[{self.kind}]" + whole[end:]

        return self.pattern.sub(replace, text)


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def is_card_number(digits: str) -> bool:
    """13-19 digits with a card-network first digit (2-6) and a valid Luhn checksum.

    Example:
        >>> is_card_number("4111111111111111"), is_card_number("4111111111111112")
        (True, False)
    """
    return (
        digits.isascii() and digits.isdigit() and 13 <= len(digits) <= 19 and digits[0] in "23456" and _luhn_ok(digits)
    )


def _card(match: re.Match[str]) -> bool:
    return is_card_number(re.sub(r"[ -]", "", match.group(0)))


def _ipv4(match: re.Match[str]) -> bool:
    try:
        ipaddress.IPv4Address(match.group(0))
    except ValueError:
        return False  # 999.1.1.1, or leading zeros: not an address
    before = match.string[max(0, match.start() - 12) : match.start()]
    return _VERSION_CONTEXT.search(before) is None


def _ipv6(match: re.Match[str]) -> bool:
    address = match.group(0).rstrip(".")
    try:
        ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return False
    return len([part for part in re.split(r"[:.]", address) if part]) >= 3


def _phone_digits(match: re.Match[str]) -> bool:
    return 8 <= sum(ch.isdigit() for ch in match.group(0)) <= 15


# Values an assignment can have that are code or placeholders, not secrets.
_NOT_SECRETS = frozenset(
    {"none", "null", "nil", "true", "false", "undefined", "str", "string", "bytes", "int", "any", "optional"}
    | {"required", "redacted", "hidden", "masked", "empty", "bearer", "basic", "token"}
)


def _assignment(match: re.Match[str]) -> bool:
    if not is_sensitive_key(match.group("key")):
        return False
    bare = match.group("quote") is None
    value = match.group("bare") if bare else match.group("value")
    if PLACEHOLDER.fullmatch(value) or value.lower() in _NOT_SECRETS or value.strip("*x.•") == "":
        return False
    if bare and (len(value) < 3 or value.lower() == match.group("key").lower()):
        return False
    return not value.startswith(("${", "{{", "%(", "$("))  # a reference to a secret, not the secret


_VERSION_CONTEXT = re.compile(r"(?:\bversion|\brelease|\bbuild|\bver\.?)\s*:?\s*$|[=~<>!]=\s*$|@\s*$", re.IGNORECASE)
_TOKEN_CHARS = r"A-Za-z0-9+/=_-"

_RULES_BEFORE_PII = (
    _Rule(
        "url_credentials",
        SECRET,
        re.compile(r"(?<=://)(?P<value>[^\s:/@\[\]]{1,256}:[^\s/@\[\]]{1,256})(?=@)"),
    ),
    _Rule("jwt", API_KEY, re.compile(r"(?<![\w-])eyJ[\w-]{6,}\.eyJ[\w-]{6,}\.[\w-]*")),
    _Rule("anthropic_key", API_KEY, re.compile(r"(?<![\w-])sk-ant-[\w-]{20,}")),
    _Rule(
        "openai_key",
        API_KEY,
        re.compile(r"(?<![\w-])sk-(?:proj-|svcacct-|admin-)?(?=[\w-]*\d)[\w-]{20,}"),
    ),
    _Rule(
        "aws_access_key_id",
        API_KEY,
        re.compile(
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
    ),
    _Rule("github_token", API_KEY, re.compile(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_\w{22,255})")),
    _Rule("slack_token", API_KEY, re.compile(r"(?<![\w-])xox[abprs]-[A-Za-z0-9-]{10,}")),
    _Rule("google_api_key", API_KEY, re.compile(r"(?<![\w-])AIza[\w-]{35}")),
    _Rule("stripe_key", API_KEY, re.compile(r"(?<![\w-])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    _Rule(
        "bearer_token",
        API_KEY,
        re.compile(r"\b(?:bearer|basic)\s+(?P<value>(?!\[)[A-Za-z0-9._~+/-]{12,}=*)", re.IGNORECASE),
    ),
    _Rule(
        "aws_secret_key",
        SECRET,
        re.compile(
            r"\baws[\w .-]{0,30}?secret[\w .-]{0,30}?[\s\"':=]{1,5}(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
            re.IGNORECASE,
        ),
    ),
    _Rule(
        "secret_assignment",
        SECRET,
        re.compile(
            r"(?<![\w-])(?P<key>[A-Za-z][\w-]{0,63}+)[\"']?\s*[:=]\s*(?:(?:bearer|basic|token)\s+)?"
            r"(?:(?P<quote>[\"'])(?P<value>[^\"'\n]{1,256})(?P=quote)|(?P<bare>[^\s\"',;&(){}\[\]<>]{1,256}+)(?![(\[]))",
            re.IGNORECASE,
        ),
        _assignment,
    ),
)

_RULES_PII = (
    _Rule(
        "email",
        EMAIL,
        re.compile(
            r"(?<![\w.%+-])[A-Za-z0-9][\w.%+-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}"
            r"(?![A-Za-z0-9])"
        ),
    ),
    _Rule(
        "credit_card",
        CREDIT_CARD,
        re.compile(r"(?<!\d)(?:\d{4}(?P<sep>[ -]?)\d{4}(?P=sep)\d{4}(?P=sep)\d{1,7}|\d{4}[ -]\d{6}[ -]\d{4,5})(?!\d)"),
        _card,
    ),
    _Rule(
        "ipv6",
        IP,
        re.compile(
            r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?:%\w+)?(?![\w:])"
        ),
        _ipv6,
    ),
    _Rule("ipv4", IP, re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\w|\.\d)"), _ipv4),
    _Rule(
        "phone_international",
        PHONE,
        re.compile(r"(?<![\w+])\+(?>[1-9]\d{0,2})(?:[ .-]?(?:\(\d{1,4}\)|\d{1,5})){1,6}+(?![\w@])"),
        _phone_digits,
    ),
    _Rule(
        "phone_us",
        PHONE,
        re.compile(r"(?<![\w+.-])(?:1[ .-]?)?(?:\([2-9]\d{2}\)[ .-]?|[2-9]\d{2}[ .-])\d{3}[ .-]\d{4}(?![\w-]|\.\d)"),
    ),
    _Rule(
        "phone_local",
        PHONE,
        re.compile(
            r"\b(?:phone|tel|telephone|mobile|cell|call|fax|sms|text|whatsapp)"
            r"(?:\s+(?:me|us|him|her|them|at|on|number|no\.?))*[\s:.#-]{0,3}(?P<value>\d{3}[ .-]\d{4})(?![\w-]|\.\d)",
            re.IGNORECASE,
        ),
    ),
)

_TOKEN = re.compile(rf"(?<![{_TOKEN_CHARS}])[{_TOKEN_CHARS}]{{20,}}+")
_TOKEN_SEPARATORS = re.compile(r"([/=]+)")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_SEGMENT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`'s own character distribution (0 for an empty or one-letter text).

    Example:
        >>> shannon_entropy("abab"), shannon_entropy("abcd")
        (1.0, 2.0)
    """
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in collections.Counter(text).values())


def _char_class(ch: str) -> str:
    return "digit" if ch.isdigit() else "upper" if ch.isupper() else "lower" if ch.islower() else "other"


def _switches(piece: str) -> int:
    """Changes between lower case, upper case and digits along `piece`; a capital starting a word is none."""
    classes = [_char_class(ch) for ch in piece]
    return sum(a != b and (a, b) != ("upper", "lower") for a, b in itertools.pairwise(classes))


def looks_random(token: str, config: RedactionConfig | None = None) -> bool:
    """Whether one token (no `/`) reads as a random secret by the high-entropy rule (module docstring).

    Args:
        token: a run of `A-Za-z0-9+_-`; trailing `=` padding is ignored.
        config: the thresholds; the defaults when None.

    Returns:
        True for a hex token of `min_hex_secret_chars`+ or a mixed token that is random enough.

    Example:
        >>> looks_random("Zx8Kq2Lm9Vb4Nc7Hd1Jf"), looks_random("Olmo3RotaryEmbedding"), looks_random("1" * 30)
        (True, False, False)
    """
    config = config or RedactionConfig()
    token = token.rstrip("=")
    if len(token) < config.min_secret_chars or _UUID.fullmatch(token):
        return False
    has_digit = any(ch.isdigit() for ch in token)
    has_letter = any(ch.isascii() and ch.isalpha() for ch in token)
    if not (has_digit and has_letter):
        return False  # words, identifiers without digits and numbers are data
    if _HEX.fullmatch(token):
        return len(token) >= config.min_hex_secret_chars
    if not any(_switches(piece) >= config.min_jumbled_switches for piece in re.split(r"[-_]", token)):
        return False  # every piece is plain (`gpt`, `4o`, `2024`, `int8`): a name made of parts
    segments = _SEGMENT.findall(token)
    mean_segment = sum(map(len, segments)) / max(1, len(segments))
    if mean_segment >= config.max_mean_segment:
        return False
    return shannon_entropy(token) >= config.entropy_factor * math.log2(min(len(token), 32))


def _redact_tokens(text: str, config: RedactionConfig, tally: _Tally) -> str:
    def replace(match: re.Match[str]) -> str:
        out = []
        for part in _TOKEN_SEPARATORS.split(match.group(0)):  # separators come back as their own parts
            if looks_random(part, config):
                tally.add("high_entropy", SECRET)
                out.append(f"[{SECRET}]")
            else:
                out.append(part)
        return "".join(out)

    return _TOKEN.sub(replace, text)


_PEM_BEGIN = re.compile(r"-----BEGIN (?P<label>[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?)-----")


def _redact_private_keys(text: str, tally: _Tally) -> str:
    # A scan with str.find, not one regex: a lazy `.*?` to the END line would rescan the rest of a hostile text
    # for every BEGIN line in it.
    out, pos = [], 0
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        end_line = f"-----END {begin.group('label')}-----"
        end = text.find(end_line, begin.end())
        out.append(text[pos : begin.start()] + f"[{SECRET}]")
        tally.add("private_key", SECRET)
        if end < 0:
            return "".join(out)  # a key cut off by a log line limit is still a key: drop the rest
        pos = end + len(end_line)
    return "".join(out) + text[pos:]


def _redact_names(text: str, detector: NameDetector, tally: _Tally) -> str:
    spans = sorted({(int(s), int(e)) for s, e in detector.find_names(text) if 0 <= int(s) < int(e) <= len(text)})
    out, pos = [], 0
    for start, end in spans:
        if start < pos:
            continue  # overlaps the previous name
        out.append(text[pos:start] + f"[{NAME}]")
        tally.add("name", NAME)
        pos = end
    return "".join(out) + text[pos:]


def _redact_string(text: str, config: RedactionConfig, tally: _Tally) -> str:
    text = _redact_private_keys(text, tally)
    for rule in _RULES_BEFORE_PII:
        text = rule.apply(text, tally)
    for rule in _RULES_PII:
        text = rule.apply(text, tally)
    text = _redact_tokens(text, config, tally)
    if config.name_detector is not None:
        text = _redact_names(text, config.name_detector, tally)
    return text


def redact_text(text: str, config: RedactionConfig | None = None) -> tuple[str, RedactionReport]:
    """One string with every PII and secret rule applied (see the module docstring).

    Args:
        text: any text.
        config: thresholds and the optional name detector; the defaults when None.

    Returns:
        The redacted text and what was replaced (counts only).

    Example:
        >>> redact_text("key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t, mail ann@example.com")[0]
        'key [API_KEY], mail [EMAIL]'
    """
    tally = _Tally()
    return _redact_string(text, config or RedactionConfig(), tally), tally.report()


def _redact_model(value: Any, config: RedactionConfig, tally: _Tally) -> Any:
    """A model name redacted by every rule but `high_entropy` (see `redact`)."""
    if not isinstance(value, str):
        return _redact_value(value, config, tally)
    own = _Tally()
    text = _redact_string(value, config, own)
    if set(own.rules) <= {"high_entropy"}:
        return value
    tally.rules.update(own.rules)  # Counter.update adds
    tally.kinds.update(own.kinds)
    return text


def _redact_value(value: Any, config: RedactionConfig, tally: _Tally, *, sensitive: bool = False) -> Any:
    if isinstance(value, str):
        if sensitive and value.strip() and not PLACEHOLDER.fullmatch(value.strip()):
            tally.add("sensitive_key", SECRET)
            return f"[{SECRET}]"
        return _redact_string(value, config, tally)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        if sensitive:
            tally.add("sensitive_key", SECRET)
            return f"[{SECRET}]"
        if isinstance(value, int) and is_card_number(str(value)):
            tally.add("credit_card", CREDIT_CARD)
            return f"[{CREDIT_CARD}]"
        return value
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new_key = _redact_string(key, config, tally) if isinstance(key, str) else key
            if new_key in out:  # two keys redacted to the same placeholder must both survive
                new_key = next(f"{new_key}#{n}" for n in itertools.count(2) if f"{new_key}#{n}" not in out)
            is_secret = isinstance(key, str) and is_sensitive_key(key)
            out[new_key] = _redact_value(
                item, config, tally, sensitive=is_secret and not isinstance(item, Mapping | list)
            )
        return out
    if isinstance(value, list | tuple):
        return [_redact_value(item, config, tally) for item in value]
    return value


def redact(record: Mapping[str, Any], config: RedactionConfig | None = None) -> tuple[dict[str, Any], RedactionReport]:
    """A copy of a record with every string redacted, recursively, and what was replaced.

    Keys are redacted like values; a string or number under a sensitive key (`is_sensitive_key`) becomes
    `[SECRET]` whole. The serving `model`'s name is left as it is when only the random-looking-token rule
    would change it (version names carry digests and commits: `agent-3f9c2d1e7b`); every other rule applies. A
    `failure_id` that redaction would change (an id made of an e-mail address) is replaced
    by `redacted-<16 hex digits of its SHA-256>`, so it stays unique without showing the value. The copy gets a
    `redaction` field: the counts by kind (added to any counts already there), which also marks it as redacted.

    Args:
        record: a failure record (`parse_failure_log`), or any JSON-like mapping.
        config: thresholds and the optional name detector; the defaults when None.

    Returns:
        The redacted copy and the report (counts by kind and by rule, never values).

    Example:
        >>> clean, report = redact({"messages": [{"role": "user", "content": "I am ann@example.com"}]})
        >>> clean["messages"][0]["content"], clean["redaction"], report.rules
        ('I am [EMAIL]', {'EMAIL': 1}, {'email': 1})
    """
    config = config or RedactionConfig()
    tally = _Tally()
    body = {key: value for key, value in record.items() if key not in ("redaction", "model")}
    clean = _redact_value(body, config, tally)
    if "model" in record:
        clean["model"] = _redact_model(record["model"], config, tally)
    failure_id = record.get("failure_id")
    if isinstance(failure_id, str) and clean.get("failure_id") != failure_id:
        clean["failure_id"] = "redacted-" + hashlib.sha256(failure_id.encode("utf-8")).hexdigest()[:16]
    report = tally.report()
    previous = record.get("redaction")
    clean["redaction"] = _add_counts(previous if isinstance(previous, Mapping) else {}, report.counts)
    return clean, report
