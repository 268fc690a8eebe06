"""Person-name detectors for redaction: the `NameDetector` protocol and the two that ship.

Regular expressions cannot find names, so `failures.redaction` replaces with `[NAME]` only the spans a
`NameDetector` (anything with `find_names(text)` returning `(start, end)` spans) finds, plugged in through
`RedactionConfig(name_detector=...)`. Two ship: `KnownNamesDetector` (names you already know, e.g. your users'
display names) and `PresidioNameDetector` (Microsoft Presidio's spaCy NER, used only where `presidio-analyzer`
and a spaCy English pipeline are installed). Presidio itself installs from PyPI, but spaCy's models do not
(`pip download en-core-web-sm` finds nothing; they are published on GitHub, and Presidio downloads
`en_core_web_lg` from there at start-up when it is missing), so offline, without a mirrored model wheel, no name
detection runs and names are kept. `RedactionConfig()` has no name detector by default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from core import SeedwheelError


@runtime_checkable
class NameDetector(Protocol):
    """Finds people's names in text: `find_names(text)` returns `(start, end)` character spans."""

    def find_names(self, text: str) -> Iterable[tuple[int, int]]:
        """Spans of `text` that are people's names (overlapping or out-of-range spans are ignored)."""
        ...


class NameDetectorUnavailableError(SeedwheelError, ImportError):
    """A name detector cannot run here (a package or model is missing); the message says what to install."""


class KnownNamesDetector:
    """Finds given names as whole words, case-insensitively (e.g. the display names of your app's users).

    Args:
        names: names to find; a full name matches only in full, so list first and last names separately to
            catch each alone.

    Raises:
        ValueError: no non-empty name given.

    Example:
        >>> KnownNamesDetector(["Ann Lee"]).find_names("Thanks, Ann Lee! (not ann leeway)")
        [(8, 15)]
        >>> from failures.redaction import RedactionConfig, redact_text
        >>> redact_text("Thanks, Ann Lee!", RedactionConfig(name_detector=KnownNamesDetector(["Ann Lee"])))[0]
        'Thanks, [NAME]!'
    """

    def __init__(self, names: Iterable[str]):
        cleaned = sorted({name.strip() for name in names if name and name.strip()}, key=len, reverse=True)
        if not cleaned:
            raise ValueError("KnownNamesDetector needs at least one non-empty name")
        self._pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, cleaned)) + r")(?!\w)", re.IGNORECASE)

    def find_names(self, text: str) -> list[tuple[int, int]]:
        """Spans of the known names in `text`."""
        return [match.span() for match in self._pattern.finditer(text)]


class PresidioNameDetector:
    """People's names found by Microsoft Presidio's analyzer (spaCy NER), where Presidio and a model are installed.

    Construction checks both and never triggers Presidio's download of a missing spaCy model (it would fetch it
    from GitHub at start-up): a missing package or model raises `NameDetectorUnavailableError` saying what to
    install.

    Args:
        model: the installed spaCy pipeline package to use.
        language: its language code.
        min_score: lowest Presidio confidence that counts as a name.

    Raises:
        NameDetectorUnavailableError: `presidio-analyzer`/`spacy` or the spaCy model is not installed.

    Example:
        >>> from failures.redaction import RedactionConfig
        >>> try:
        ...     config = RedactionConfig(name_detector=PresidioNameDetector())
        ... except NameDetectorUnavailableError:
        ...     config = RedactionConfig()  # no NER here: names are kept
    """

    def __init__(self, model: str = "en_core_web_lg", *, language: str = "en", min_score: float = 0.6):
        try:
            import spacy.util
            from presidio_analyzer import AnalyzerEngine
            from presidio_analyzer.nlp_engine import NlpEngineProvider
        except ImportError as exc:
            raise NameDetectorUnavailableError(
                f"PresidioNameDetector needs presidio-analyzer and spaCy ({exc.name} is missing): "
                f"pip install presidio-analyzer, then install the spaCy pipeline {model} from a wheel you mirror "
                "(spaCy's models are not on PyPI)"
            ) from exc
        if not spacy.util.is_package(model):
            raise NameDetectorUnavailableError(
                f"the spaCy pipeline {model} is not installed, and Presidio would download it from GitHub",
                hint=f"install its wheel (pip install /path/to/{model}-<version>-py3-none-any.whl) or pass model= "
                "an installed pipeline",
            )
        provider = NlpEngineProvider(
            nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": language, "model_name": model}]}
        )
        self._analyzer = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=[language])
        self._language = language
        self._min_score = min_score

    def find_names(self, text: str) -> list[tuple[int, int]]:
        """Spans Presidio labels PERSON with at least `min_score`."""
        results = self._analyzer.analyze(text=text, entities=["PERSON"], language=self._language)
        return [(r.start, r.end) for r in results if r.score >= self._min_score]
