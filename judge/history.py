"""Which judge setup labelled the data last time, so a run can say why it re-judged everything.

A judgment's cache key holds the rubric (through the template version), the judge model, the endpoint and the
generation params: change any of them and every task is judged again, at full cost. `JudgeSetup` is that part
of the key; a run saves it in a small JSON file (atomically, so a crash leaves the previous record), and the
next run compares: `describe_change(previous, current)` gives `first run`, `unchanged`, or what changed, e.g.
`rubric task_quality-r1 -> task_quality-r2; judge model a -> b`.

```python
previous = load_setup(path)            # None on the first run
print(describe_change(previous, run.setup))
save_setup(path, run.setup)            # after the run succeeded
```
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.tables import atomic_write
from judge.prompt import JudgePrompt
from langmodels import EndpointConfig

STATE_FORMAT = 1


class JudgeHistoryError(SeedwheelError, ValueError):
    """A saved judge setup that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class JudgeSetup:
    """What decides whether a cached judgment can be reused, besides the task itself.

    Attributes:
        rubric: the rubric's label (`task_quality-r1`).
        template_version: the first-pass prompt template's version (it embeds the rubric label).
        model: the judge model, as the endpoint names it.
        endpoint: the endpoint's identity in cache keys (`EndpointConfig.endpoint_id`).
        params: the generation params every judge request is sent with (config defaults and overrides).

    Example:
        >>> from judge.rubric import DEFAULT_RUBRIC
        >>> config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="qwen", max_tokens=256)
        >>> JudgeSetup.of(JudgePrompt(DEFAULT_RUBRIC, {"temperature": 0.0}), config).params
        {'max_tokens': 256, 'temperature': 0.0}
    """

    rubric: str
    template_version: str
    model: str
    endpoint: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, prompt: JudgePrompt, config: EndpointConfig) -> JudgeSetup:
        """The setup of `prompt`'s requests sent through a client configured with `config`."""
        params = {**config.generation_params(), **prompt.params}
        return cls(
            rubric=prompt.rubric.label,
            template_version=prompt.template_version,
            model=config.model,
            endpoint=config.endpoint_id,
            params={k: v for k, v in sorted(params.items()) if v is not None},
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (for metadata and the state file)."""
        return {**asdict(self), "params": dict(self.params)}


def describe_change(previous: JudgeSetup | None, current: JudgeSetup) -> str:
    """Why this run did (or did not) re-judge everything, in words.

    Args:
        previous: the setup of the last successful run, or None when there is no record of one.
        current: this run's setup.

    Returns:
        `first run`, `unchanged`, or the changes joined by `; `; the prompt template is named only when it
        changed without the rubric (a new rubric always gives a new template version).

    Example:
        >>> a = JudgeSetup("task_quality-r1", "judge-task_quality-r1-t1", "qwen-7b", "https://api/v1")
        >>> describe_change(a, JudgeSetup("task_quality-r2", "judge-task_quality-r2-t1", "qwen-14b", "https://api/v1"))
        'rubric task_quality-r1 -> task_quality-r2; judge model qwen-7b -> qwen-14b'
    """
    if previous is None:
        return "first run"
    changes = []
    if previous.rubric != current.rubric:
        changes.append(f"rubric {previous.rubric} -> {current.rubric}")
    elif previous.template_version != current.template_version:
        changes.append(f"judge prompt {previous.template_version} -> {current.template_version}")
    if previous.model != current.model:
        changes.append(f"judge model {previous.model} -> {current.model}")
    if previous.endpoint != current.endpoint:
        changes.append(f"judge endpoint {previous.endpoint} -> {current.endpoint}")
    if dict(previous.params) != dict(current.params):
        changes.append(f"judge params {_compact(previous.params)} -> {_compact(current.params)}")
    return "; ".join(changes) or "unchanged"


def _compact(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def load_setup(path: str | Path) -> JudgeSetup | None:
    """The setup saved at `path` by `save_setup`, or None when there is no file (no previous run).

    Raises:
        JudgeHistoryError: the file is not a saved setup (hand-edited, or from an unknown format); the message
            says to delete it.

    Example:
        >>> load_setup("/nonexistent/judged_tasks.json") is None
        True
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JudgeHistoryError(
            f"{path}: cannot read the saved judge setup ({exc.strerror}); check its permissions"
        ) from exc
    try:
        data = json.loads(text)
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {STATE_FORMAT}")
        saved = data["setup"]
        setup = JudgeSetup(**{f.name: saved[f.name] for f in fields(JudgeSetup)})
        if not all(isinstance(getattr(setup, f.name), str) for f in fields(JudgeSetup) if f.name != "params"):
            raise ValueError("a field is not a string")
        if not isinstance(setup.params, dict):
            raise ValueError("params is not an object")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JudgeHistoryError(
            f"{path}: not a saved judge setup ({type(exc).__name__}: {exc}); delete the file and the next run "
            "records a new one (it will report 'first run')"
        ) from None
    return setup


def save_setup(path: str | Path, setup: JudgeSetup) -> None:
    """Save `setup` at `path` atomically (a crash keeps the previous file), creating the folder if needed."""
    with atomic_write(Path(path), "w") as handle:
        json.dump({"format": STATE_FORMAT, "setup": setup.as_dict()}, handle, indent=2, sort_keys=True)
        handle.write("\n")
