"""Team rules over the built-in diagnosis: how a rules file is read, which rule decides, and the CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.diagnose.analyze import Diagnosis, diagnose
from app.diagnose.rules import MAX_LINE, Rule, RuleDecision, RuleScanner, parse_rules
from app.errors import InvalidInput
from tests.support.cli import run_cli

MAMBA_ERROR = "ValueError: speculative decoding needs mamba_scheduler_strategy extra_buffer, got no_buffer"


def apply_rules(rules: tuple[Rule, ...], text: str, diagnosis: Diagnosis) -> tuple[Diagnosis, RuleDecision | None]:
    """The rules over a log held whole, deciding `diagnosis`, as the CLI and the dashboard feed them."""
    scanner = RuleScanner(rules)
    scanner.feed(text)
    return scanner.decide(diagnosis)


def hybrid_log(error: str = MAMBA_ERROR) -> str:
    return "\n".join(
        [
            "[2025-11-02 10:00:01] server_args=ServerArgs(model_path='org/hybrid', tp_size=1)",
            "[2025-11-02 10:00:02] The site profile set NCCL_P2P_DISABLE=1",
            "[2025-11-02 10:00:03 TP0] Load weight begin. avail mem=78.10 GB",
            "[2025-11-02 10:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 10, in __init__',
            "    self.init_memory_pool()",
            error,
            "",
        ]
    )


def decided(rules_toml: str, log: str) -> tuple[str, str, str | None, str | None]:
    """The class, hint and fingerprint the rules give `log`, and the title of the rule that decided."""
    result, decision = apply_rules(parse_rules(rules_toml), log, diagnose(log))
    return result.failure_class, result.hint, result.fingerprint, decision.rule.title if decision else None


@pytest.mark.parametrize(
    ("rules_toml", "says"),
    [
        ("[[rule]\n", "not valid TOML: "),
        ('title = "x"\n', "unknown top-level key 'title': a rules file holds only [[rule]] tables"),
        ('rule = "x"\n', "`rule` must be a list of tables, written [[rule]]"),
        (
            '[[rule]]\nmatch = "a"\nclass = "oom"\ntitle = "t"\n[[rule]]\nmatchh = "a"\nclass = "oom"\ntitle = "t"\n',
            "rule 2: unknown key 'matchh'; a rule takes match, regex, class, title, hint, scope, flag_aware, merge",
        ),
        ('[[rule]]\nmatch = "a"\nclass = "memory"\ntitle = "t"\n', "rule 1: class 'memory' is not one of oom, "),
        ('[[rule]]\nmatch = "a"\ntitle = "t"\n', "rule 1: class is required and must not be empty"),
        ('[[rule]]\nmatch = ""\nclass = "oom"\ntitle = "t"\n', "rule 1: match is required and must not be empty"),
        ('[[rule]]\nclass = "oom"\ntitle = "t"\n', "rule 1: match is required and must not be empty"),
        ('[[rule]]\nmatch = "a"\nclass = "oom"\ntitle = " "\n', "rule 1: title is required and must not be empty"),
        ('[[rule]]\nmatch = 3\nclass = "oom"\ntitle = "t"\n', "rule 1: match must be a string, not int"),
        ('[[rule]]\nmatch = "a"\nregex = "yes"\nclass = "oom"\ntitle = "t"\n', "rule 1: regex must be true or false"),
        (
            '[[rule]]\nmatch = "a"\nflag_aware = 1\nclass = "oom"\ntitle = "t"\n',
            "rule 1: flag_aware must be true or false, not 1",
        ),
        (
            '[[rule]]\nmatch = "a-b"\nregex = true\nflag_aware = true\nclass = "oom"\ntitle = "t"\n',
            "rule 1: flag_aware applies to fixed strings; in a regular expression write [-_]",
        ),
        (
            '[[rule]]\nmatch = "a"\nscope = "all"\nclass = "oom"\ntitle = "t"\n',
            "rule 1: scope 'all' must be 'root' (the root error) or 'any' (any line)",
        ),
        (
            '[[rule]]\nmatch = "a("\nregex = true\nclass = "oom"\ntitle = "t"\n',
            "rule 1: match is not a valid regular expression: missing )",
        ),
        ('[[rule]]\nmerge = "abc"\nclass = "oom"\ntitle = "t"\n', "rule 1: merge must be a list of fingerprints"),
        (
            '[[rule]]\nmerge = ["2b194bb2"]\nclass = "oom"\ntitle = "t"\n',
            "rule 1: merge lists '2b194bb2', which is not a fingerprint (16 hex digits)",
        ),
    ],
)
def test_a_bad_rules_file_is_refused_with_a_sentence_naming_the_rule_and_field(rules_toml: str, says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_rules(rules_toml)
    assert str(refused.value).startswith(says)


def test_an_empty_rules_file_leaves_the_built_in_diagnosis() -> None:
    log = hybrid_log()
    assert parse_rules("") == ()
    assert decided("", log) == ("other", diagnose(log).hint, diagnose(log).fingerprint, None)


def test_a_matching_rule_decides_class_and_hint_and_keeps_the_built_in_answer() -> None:
    log = hybrid_log()
    rules = parse_rules(
        '[[rule]]\nmatch = "got no_buffer"\nclass = "arg-override"\ntitle = "Hybrid needs extra_buffer"\n'
        'hint = "Pass --mamba-scheduler-strategy extra_buffer."\nauthor = "ana"\n'
    )
    built_in = diagnose(log)
    result, decision = apply_rules(rules, log, built_in)
    assert (result.failure_class, result.hint) == ("arg-override", "Pass --mamba-scheduler-strategy extra_buffer.")
    assert result.root_error == MAMBA_ERROR and result.fingerprint == built_in.fingerprint
    assert decision is not None and (decision.rule.title, decision.rule.author) == ("Hybrid needs extra_buffer", "ana")
    assert (decision.evidence, decision.line) == (MAMBA_ERROR, built_in.root_line)
    assert (built_in.recognised, result.recognised) == (False, True)  # a person placed what no rule could


def test_a_rule_without_a_hint_gives_its_class_hint() -> None:
    failure_class, hint, _, _ = decided('[[rule]]\nmatch = "no_buffer"\nclass = "oom"\ntitle = "t"\n', hybrid_log())
    assert failure_class == "oom" and hint.startswith("GPU memory ran out.")


def test_root_scope_looks_only_at_the_root_error_and_any_scope_at_every_line() -> None:
    log = hybrid_log()
    root_rule = '[[rule]]\nmatch = "NCCL_P2P_DISABLE=1"\nclass = "nccl"\ntitle = "P2P off"\n'
    assert decided(root_rule, log)[3] is None
    any_rule = root_rule + 'scope = "any"\n'
    assert decided(any_rule, log)[:1] + decided(any_rule, log)[3:] == ("nccl", "P2P off")
    _, decision = apply_rules(parse_rules(any_rule), log, diagnose(log))
    assert decision is not None and (decision.line, decision.evidence) == (
        2,
        "[2025-11-02 10:00:02] The site profile set NCCL_P2P_DISABLE=1",
    )


def test_flag_aware_matching_finds_a_flag_in_its_field_spelling_unless_turned_off() -> None:
    rule = '[[rule]]\nmatch = "--mamba-scheduler-strategy"\nclass = "arg-override"\ntitle = "Mamba strategy"\n'
    assert decided(rule, hybrid_log())[3] == "Mamba strategy"
    assert decided(rule + "flag_aware = false\n", hybrid_log())[3] is None
    dashed = hybrid_log("ValueError: --mamba-scheduler-strategy no_buffer does not support speculative decoding")
    assert decided(rule.replace("--mamba-scheduler-strategy", "mamba_scheduler"), dashed)[3] == "Mamba strategy"


def test_a_match_is_a_fixed_string_unless_regex_is_set() -> None:
    rule = '[[rule]]\nmatch = "got \\\\w+_buffer"\nclass = "arg-override"\ntitle = "Buffer"\n'
    assert decided(rule, hybrid_log())[3] is None
    assert decided(rule + "regex = true\n", hybrid_log())[3] == "Buffer"
    assert decided(rule.replace("\\\\w+", "(") + "regex = false\n", hybrid_log("ValueError: got (_buffer"))[3]


def test_the_first_matching_rule_in_file_order_wins() -> None:
    rules = (
        '[[rule]]\nmatch = "no such thing"\nclass = "driver"\ntitle = "Never"\n'
        '[[rule]]\nmatch = "NCCL_P2P"\nscope = "any"\nclass = "nccl"\ntitle = "First"\n'
        '[[rule]]\nmatch = "no_buffer"\nclass = "oom"\ntitle = "Second"\n'
    )
    assert decided(rules, hybrid_log())[::3] == ("nccl", "First")
    swapped = rules.replace('scope = "any"\n', "")
    assert decided(swapped, hybrid_log())[::3] == ("oom", "Second")


def test_merge_files_listed_fingerprints_under_the_first_one_and_the_rule_decides() -> None:
    first, second = hybrid_log(), hybrid_log("RuntimeError: the scheduler lost its mamba pool")
    kept, merged = diagnose(first).fingerprint, diagnose(second).fingerprint
    assert kept and merged and kept != merged
    rule = f'[[rule]]\nmerge = ["{kept}", "{merged}"]\nclass = "arg-override"\ntitle = "Mamba pool"\n'
    assert decided(rule, first)[2:] == (kept, "Mamba pool")
    assert decided(rule, second)[::2] == ("arg-override", kept)
    unrelated = hybrid_log("OSError: [Errno 28] No space left on device")
    assert decided(rule, unrelated)[2:] == (diagnose(unrelated).fingerprint, None)


def test_a_catastrophic_regex_is_skipped_with_a_warning_and_the_next_rule_decides() -> None:
    log = hybrid_log("ValueError: " + "a" * 50_000 + "!")
    rules = parse_rules(
        '[[rule]]\nmatch = "(a+)+$"\nregex = true\nscope = "any"\nclass = "oom"\ntitle = "Slow any"\n'
        '[[rule]]\nmatch = "(a+)+$"\nregex = true\nclass = "oom"\ntitle = "Slow root"\n'
        '[[rule]]\nmatch = "aaaa!"\nclass = "timeout"\ntitle = "Fixed"\n'
    )
    scanner = RuleScanner(rules)
    scanner.feed(log)
    result, decision = scanner.decide(diagnose(log))
    assert decision is not None and (result.failure_class, decision.rule.title) == ("timeout", "Fixed")
    assert [warning.split(":")[0] for warning in scanner.warnings] == [
        "rule 1 (Slow any) was skipped",
        "rule 2 (Slow root) was skipped",
    ]
    assert "its regular expression ran past" in scanner.warnings[0]


def test_a_line_without_a_newline_is_held_only_up_to_the_line_limit() -> None:
    scanner = RuleScanner(parse_rules('[[rule]]\nmatch = "tail"\nscope = "any"\nclass = "oom"\ntitle = "t"\n'))
    for _ in range(40):
        scanner.feed("x" * (MAX_LINE // 8))
    scanner.feed("tail\n")
    _, decision = scanner.decide(diagnose("INFO ok\n"))
    assert decision is None  # the matching text lay past the limit, and was never held


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(hybrid_log().encode())), max_size=8))
def test_the_decision_does_not_depend_on_how_the_log_arrives(cuts: list[int]) -> None:
    data = hybrid_log("ValueError: caf\u00e9 mamba_scheduler_strategy").encode()
    rules = parse_rules(
        '[[rule]]\nmatch = "caf\u00e9 mamba"\nregex = true\nscope = "any"\nclass = "oom"\ntitle = "Cafe"\n'
        '[[rule]]\nmatch = "NCCL_P2P_DISABLE"\nscope = "any"\nclass = "nccl"\ntitle = "P2P"\n'
    )
    scanner = RuleScanner(rules)
    bounds = [0, *sorted(cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        scanner.feed_bytes(data[start:end])
    _, decision = scanner.decide(diagnose(data.decode()))
    assert decision is not None and (decision.rule.title, decision.line) == ("Cafe", 7)


def test_cli_applies_a_rules_file_in_json_and_text(tmp_path: Path) -> None:
    log, rules = tmp_path / "server.log", tmp_path / "rules.toml"
    log.write_text(hybrid_log())
    rules.write_text(
        '[[rule]]\nmatch = "--mamba-scheduler-strategy"\nclass = "arg-override"\ntitle = "Hybrid needs extra_buffer"\n'
        'hint = "Pass --mamba-scheduler-strategy extra_buffer."\nauthor = "ana"\n'
    )
    as_json = run_cli("diagnose", str(log), "--rules", str(rules), "--json")
    assert as_json.returncode == 1, as_json.stderr  # a failure, of the rule's class
    answer = json.loads(as_json.stdout)
    assert answer["class"] == "arg-override" and answer["hint"] == "Pass --mamba-scheduler-strategy extra_buffer."
    assert answer["rule"]["title"] == "Hybrid needs extra_buffer" and answer["rule"]["author"] == "ana"
    assert answer["built_in"]["class"] == "other" and answer["fingerprint"] == answer["built_in"]["fingerprint"]
    as_text = run_cli("diagnose", str(log), "--rules", str(rules))
    assert "team rule:    Hybrid needs extra_buffer (by ana)" in as_text.stdout.splitlines()
    assert "built-in:     other (" in as_text.stdout
    rules.write_text('[[rule]]\nmatch = "nothing like it"\nclass = "oom"\ntitle = "t"\n')
    unmatched = json.loads(run_cli("diagnose", str(log), "--rules", str(rules), "--json").stdout)
    assert (unmatched["class"], unmatched["rule"], unmatched["built_in"]) == ("other", None, None)


def test_cli_refuses_a_bad_or_missing_rules_file_with_exit_2_and_one_sentence(tmp_path: Path) -> None:
    log, rules = tmp_path / "server.log", tmp_path / "rules.toml"
    log.write_text(hybrid_log())
    rules.write_text('[[rule]]\nmatch = "(unclosed"\nregex = true\nclass = "oom"\ntitle = "t"\n')
    refused = run_cli("diagnose", str(log), "--rules", str(rules))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"launchdeck: rules file {rules}: rule 1: match is not a valid regular expression")
    assert len(refused.stderr.splitlines()) == 1
    missing = run_cli("diagnose", str(log), "--rules", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and "cannot read it: No such file or directory" in missing.stderr
    assert "Traceback" not in refused.stderr + missing.stderr


def test_cli_warns_on_stderr_when_a_rule_is_skipped(tmp_path: Path) -> None:
    log, rules = tmp_path / "server.log", tmp_path / "rules.toml"
    log.write_text(hybrid_log("ValueError: " + "a" * 50_000 + "!"))
    rules.write_text('[[rule]]\nmatch = "(a+)+$"\nregex = true\nclass = "oom"\ntitle = "Slow"\n')
    result = run_cli("diagnose", str(log), "--rules", str(rules), "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["rule"] is None
    assert result.stderr.startswith("launchdeck: warning: rule 1 (Slow) was skipped: ")
