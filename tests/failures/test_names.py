"""Name detectors: known names as whole words, and the Presidio adapter without Presidio or its model."""

import sys
import types

import pytest

from failures.names import KnownNamesDetector, NameDetectorUnavailableError, PresidioNameDetector
from failures.redaction import RedactionConfig, redact_text


@pytest.mark.parametrize(
    ("names", "text", "spans"),
    [
        # A name is found as a whole word, case-insensitively.
        (["Ann"], "ann and ANN met", [(0, 3), (8, 11)]),
        # Not inside another word: "annex", "Leeds" (a name's start) and "Joann" (its end) are no names.
        (["Ann", "Lee"], "annex and Leeds", []),
        (["Ann"], "Joann", []),
        # A full name matches only in full; the longer name wins where both are listed.
        (["Bob Smith", "Bob"], "Bob Smith and Bob", [(0, 9), (14, 17)]),
        # Regex characters in a name are literal.
        (["A.J."], "A.J. and AxJx", [(0, 4)]),
        # Empty and blank names are dropped.
        (["", "  ", "Ann"], "Ann", [(0, 3)]),
    ],
)
def test_known_names_spans(names, text, spans):
    assert KnownNamesDetector(names).find_names(text) == spans


def test_known_names_need_a_name():
    with pytest.raises(ValueError, match="at least one non-empty name"):
        KnownNamesDetector(["", " "])


def test_known_names_detector():
    config = RedactionConfig(name_detector=KnownNamesDetector(["Ann", "Lee", "Bob Smith"]))
    text, report = redact_text("Ann Lee wrote to Bob Smith; annex and Leeds stay.", config)
    assert text == "[NAME] [NAME] wrote to [NAME]; annex and Leeds stay."
    assert report.counts == {"NAME": 3}


def test_presidio_detector_without_presidio_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)  # makes the import fail, installed or not
    with pytest.raises(NameDetectorUnavailableError, match="pip install presidio-analyzer"):
        PresidioNameDetector()


def _fake_presidio(monkeypatch, *, model_installed):
    """Fake `spacy.util` and `presidio_analyzer` modules, so the adapter runs without the real (unavailable) ones."""

    class Result:
        def __init__(self, start, end, score):
            self.start, self.end, self.score = start, end, score

    class AnalyzerEngine:
        def __init__(self, nlp_engine, supported_languages):
            self.languages = supported_languages

        def analyze(self, text, entities, language):
            assert entities == ["PERSON"] and language in self.languages
            return [Result(0, 3, 0.85), Result(8, 12, 0.3)]

    class NlpEngineProvider:
        def __init__(self, nlp_configuration):
            self.configuration = nlp_configuration

        def create_engine(self):
            return "engine"

    spacy = types.ModuleType("spacy")
    spacy.util = types.ModuleType("spacy.util")
    spacy.util.is_package = lambda name: model_installed
    presidio = types.ModuleType("presidio_analyzer")
    presidio.AnalyzerEngine = AnalyzerEngine
    presidio.nlp_engine = types.ModuleType("presidio_analyzer.nlp_engine")
    presidio.nlp_engine.NlpEngineProvider = NlpEngineProvider
    for name, module in [
        ("spacy", spacy),
        ("spacy.util", spacy.util),
        ("presidio_analyzer", presidio),
        ("presidio_analyzer.nlp_engine", presidio.nlp_engine),
    ]:
        monkeypatch.setitem(sys.modules, name, module)


def test_presidio_detector_refuses_to_download_a_missing_model(monkeypatch):
    _fake_presidio(monkeypatch, model_installed=False)
    with pytest.raises(NameDetectorUnavailableError, match="would download it from GitHub"):
        PresidioNameDetector()


def test_presidio_detector_keeps_confident_person_spans(monkeypatch):
    _fake_presidio(monkeypatch, model_installed=True)
    config = RedactionConfig(name_detector=PresidioNameDetector(min_score=0.6))
    assert redact_text("Ann and Dora met", config)[0] == "[NAME] and Dora met"
