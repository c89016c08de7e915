"""Rules of type great_expectations, run through Great Expectations' Spark datasource, which computes its
own metrics (see validation.py, which runs every other rule)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Rule

# What an expectation found: whether it passed, the values it observed and a sentence for people.
Verdict = tuple[bool, dict[str, Any], str]


def expectations_of(rules: Sequence[Rule]) -> dict[int, Any]:
    """The Great Expectations expectation of each great_expectations rule, by the rule's index. Raises
    ValueError when one names an unknown expectation or gives it invalid arguments."""
    return {
        index: _expectation(rule, index)
        for index, rule in enumerate(rules)
        if rule.type == "great_expectations"
    }


def _expectation(rule: Rule, index: int) -> Any:
    """The Great Expectations expectation a rule names; `meta` carries the rule's index back in results."""
    # Imported on first use: it is slow to import and most rule sets do without.
    import great_expectations as gx
    from great_expectations.expectations.expectation import Expectation

    assert rule.expectation is not None, "Rule requires the expectation of a great_expectations rule"
    expectation_class = getattr(gx.expectations, rule.expectation, None)
    if not (isinstance(expectation_class, type) and issubclass(expectation_class, Expectation)):
        raise ValueError(f"rule {rule.name}: unknown Great Expectations expectation {rule.expectation!r}")
    kwargs = {"column": rule.column, **rule.kwargs} if rule.column else dict(rule.kwargs)
    try:
        return expectation_class(**kwargs, meta={"medallion_rule_index": index})
    except (TypeError, ValueError) as error:
        raise ValueError(f"rule {rule.name}: invalid arguments for {rule.expectation}: {error}") from error


def run_expectations(
    df: DataFrame, rules: Sequence[Rule], expectations: dict[int, Any]
) -> dict[int, Verdict]:
    """Run the expectations as one suite on one batch, so Great Expectations can share metrics among them.
    Returns each rule's verdict, by its index."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no progress bars in the run's logs
    # persist=False: Great Expectations would otherwise cache the caller's DataFrame and never release it.
    batch = (
        context.data_sources.add_spark("medallion", persist=False)
        .add_dataframe_asset("dataframe")
        .add_batch_definition_whole_dataframe("whole_dataframe")
        .get_batch(batch_parameters={"dataframe": df})
    )
    suite = gx.ExpectationSuite(name="medallion", expectations=list(expectations.values()))
    outcomes = {}
    for result in batch.validate(suite).results:
        config = result.expectation_config
        assert config is not None, "a suite's result carries its expectation's configuration"
        index = config.meta["medallion_rule_index"]
        outcomes[index] = _verdict(rules[index], result.to_json_dict())
    return outcomes


def _verdict(rule: Rule, result: dict[str, Any]) -> Verdict:
    observed = result["result"]
    errors = _exception_messages(result["exception_info"])
    if errors:
        message = f"could not run: {'; '.join(errors)}"
    elif "unexpected_count" in observed:
        verdict = "passed" if result["success"] else "failed"
        message = f"{verdict}: {observed['unexpected_count']} of {observed['element_count']} rows unexpected"
    else:
        verdict = "passed" if result["success"] else "failed"
        message = f"{verdict} with observed value {observed.get('observed_value')!r}"
    return bool(result["success"]), observed, f"{rule.name}: {rule.expectation} {message}"


def _exception_messages(info: dict[str, Any]) -> list[str]:
    # A result that raised keys its exception details by the metric that failed; one that did not is flat.
    details = [info] if "raised_exception" in info else list(info.values())
    return list(
        dict.fromkeys(detail["exception_message"] for detail in details if detail.get("raised_exception"))
    )
