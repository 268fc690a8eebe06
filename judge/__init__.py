"""An LLM judge for task records: a versioned rubric, labels (not filters), and calibration against humans.

```python
from langmodels import EndpointConfig, LLMCache, LLMClient
from judge import (
    DEFAULT_RUBRIC, AcceptanceRule, CalibrationFloors, audit_labels, calibrate, check, judge_tasks, load_audit_set,
)

client = LLMClient(EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct"),
                   LLMCache(".seedwheel/llm_cache"))
run = judge_tasks(tasks, client=client, rubric=DEFAULT_RUBRIC, rule=AcceptanceRule({"reference_correctness": 4}))
run.rows()         # one label row per task: verdict, scores, failed_criteria, error, raw, repaired, cached, tokens
run.stats.as_dict()  # calls vs cached, repairs, judge errors by code, tokens

items = load_audit_set("seeds/audit")
audit = judge_tasks([i.as_task() for i in items], client=client)
passed, reasons = check(calibrate(audit.judgments, audit_labels(items)), CalibrationFloors())
```

Modules: `rubric` (criteria, acceptance rule, answer schema), `prompt` (the judge's messages), `parse` (answer
-> scores or an error code), `run` (`judge_tasks`), `calibration` (audit set, agreement, self-consistency, floors),
`history` (which setup judged last, and what changed since), `labels` (the label columns of a task table),
`report` (score counts, worst tasks, a summary).
Pure Python: no Dagster here.
"""

from judge.calibration import (
    AuditItem,
    AuditSetError,
    Calibration,
    CalibrationFloors,
    CalibrationInputError,
    Consistency,
    audit_labels,
    calibrate,
    calibration_sample,
    check,
    cohen_kappa,
    load_audit_set,
    self_consistency,
)
from judge.history import JudgeHistoryError, JudgeSetup, describe_change, load_setup, save_setup
from judge.labels import LABEL_COLUMNS, calibration_verdict, label_rows, label_table, tasks_to_label
from judge.parse import PARSE_ERRORS, ParsedAnswer, parse_judgment
from judge.prompt import (
    FAMILY_DESCRIPTIONS,
    JUDGE_TEMPLATE_VERSION,
    REPAIR_TEMPLATE_VERSION,
    JudgePrompt,
    judge_messages,
    repair_messages,
    repair_template_version,
    template_version,
)
from judge.report import (
    accept_rate,
    format_summary,
    lowest_score_counts,
    score_counts,
    verdicts_by_family,
    worst_labelled,
    worst_scored,
)
from judge.rubric import (
    DEFAULT_RUBRIC,
    DEFAULT_RULE,
    AcceptanceRule,
    Criterion,
    Rubric,
    response_schema,
)
from judge.run import (
    JUDGMENT_VERDICTS,
    LABEL_PARAMS,
    LLM_ERROR,
    NOT_JUDGED,
    VERDICTS,
    JudgeInputError,
    JudgeRun,
    JudgeStats,
    Judgment,
    JudgmentVerdict,
    TokenPrices,
    Verdict,
    judge_setup,
    judge_tasks,
)

__all__ = [
    "DEFAULT_RUBRIC",
    "DEFAULT_RULE",
    "FAMILY_DESCRIPTIONS",
    "JUDGE_TEMPLATE_VERSION",
    "JUDGMENT_VERDICTS",
    "LABEL_COLUMNS",
    "LABEL_PARAMS",
    "LLM_ERROR",
    "NOT_JUDGED",
    "PARSE_ERRORS",
    "REPAIR_TEMPLATE_VERSION",
    "VERDICTS",
    "AcceptanceRule",
    "AuditItem",
    "AuditSetError",
    "Calibration",
    "CalibrationFloors",
    "CalibrationInputError",
    "Consistency",
    "Criterion",
    "JudgeHistoryError",
    "JudgeInputError",
    "JudgePrompt",
    "JudgeRun",
    "JudgeSetup",
    "JudgeStats",
    "Judgment",
    "JudgmentVerdict",
    "ParsedAnswer",
    "Rubric",
    "TokenPrices",
    "Verdict",
    "accept_rate",
    "audit_labels",
    "calibrate",
    "calibration_sample",
    "calibration_verdict",
    "check",
    "cohen_kappa",
    "describe_change",
    "format_summary",
    "judge_messages",
    "judge_setup",
    "judge_tasks",
    "label_rows",
    "label_table",
    "load_audit_set",
    "load_setup",
    "lowest_score_counts",
    "parse_judgment",
    "repair_messages",
    "repair_template_version",
    "response_schema",
    "save_setup",
    "score_counts",
    "self_consistency",
    "tasks_to_label",
    "template_version",
    "verdicts_by_family",
    "worst_labelled",
    "worst_scored",
]
