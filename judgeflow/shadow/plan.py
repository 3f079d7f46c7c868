"""What a shadow run will do and cost, shown before it asks (as a backfill does)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import SecretStr

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.sources.table import SourceTable
from judgeflow.db.epochs import configured, current_epochs
from judgeflow.errors import ConfigError
from judgeflow.config.key_transport import allowed_hosts, check_judge_destination, litellm_environment
from judgeflow.config.settings import Settings
from judgeflow.shadow.sample import add_conversations, select_sample, strata
from judgeflow.sources.identity import result_source


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def _provider(model: str) -> str:
    """litellm's provider prefix of a model string ('' for a bare name)."""
    return model.split("/", 1)[0] if "/" in model else ""


def candidate_settings(settings: Settings, judge_model: str | None) -> Settings:
    """The settings with the candidate judge in place of the configured one (the
    metrics' code is always as it is now). The candidate's endpoint and key come
    from JUDGEFLOW_SHADOW_JUDGE_API_BASE / _KEY (`--judge-api-base` /
    `--judge-api-key`), never from a flow parameter. The production key goes along
    only to the production endpoint: a candidate on another base without a key of
    its own is refused; one on another provider (no base) gets its own key or none,
    and litellm then uses that provider's environment key."""
    model = judge_model or settings.judge_model
    production_base = _secret(settings.judge_api_base)
    base = _secret(settings.shadow_judge_api_base) or production_base
    key = settings.shadow_judge_api_key
    if base != production_base and key is None:
        raise ConfigError(
            "the candidate's API base is not the production judge's: it needs its own key (--judge-api-key or "
            "JUDGEFLOW_SHADOW_JUDGE_API_KEY); the production key is never sent to another endpoint"
        )
    same_endpoint = base == production_base and (base is not None or _provider(model) == _provider(settings.judge_model))
    if key is None and same_endpoint:
        key = settings.judge_api_key
    check_judge_destination(model, base, _secret(key), environ=litellm_environment(),
                            allowed_hosts=allowed_hosts(settings), base_setting="the candidate's API base",
                            key_setting="the candidate's key")
    return settings.model_copy(update={
        "judge_model": model, "judge_api_base": SecretStr(base) if base else None, "judge_api_key": key,
    })


@dataclass
class ShadowPlan:
    candidate_model: str
    pairs: int
    per_stratum: dict[tuple[str, str], int]
    cost_usd: float | None
    basis: str
    current_cost_usd: float | None
    same_as_current: list[str]  # metrics whose judge in force is the candidate already

    def describe(self, per_segment: int, segment_by: str | None) -> str:
        cost = "unknown" if self.cost_usd is None else f"${self.cost_usd:,.4f}"
        lines = [
            f"{self.pairs} (trace, metric) pair(s) to judge with {self.candidate_model}, "
            f"up to {per_segment} per {'segment of ' + segment_by if segment_by else 'metric (not stratified)'}; "
            f"estimated cost {cost} ({self.basis})",
        ]
        if self.current_cost_usd is not None:
            lines.append(f"the judge in force spent ${self.current_cost_usd:,.4f} on the same pairs")
        for (metric, stratum), n in sorted(self.per_stratum.items()):
            lines.append(f"  {metric} {segment_by + '=' + stratum if segment_by else '(all)'}: {n}")
        for metric in self.same_as_current:
            lines.append(f"note: {metric}'s judge in force is already {self.candidate_model} with the current "
                         "metric version: the report measures the judge against itself")
        lines.append("results go to judgeflow.shadow_results only: eval_results and alerts are not touched")
        return "\n".join(lines)


def plan_shadow(
    settings: Settings, candidate: Settings, *, metrics: list[str], since: datetime, segment_by: str | None,
    per_segment: int, seed: str,
) -> ShadowPlan:
    from judgeflow.judge.pricing import prices_for
    from judgeflow.metrics.cost import estimate_pair_cost

    engine = engine_for(settings)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        pairs = select_sample(conn, SourceTable.parse(settings.traces_table), metrics=metrics, since=since,
                              segment_by=segment_by, per_segment=per_segment, seed=seed,
                              result_source=result_source(settings))
        pairs = add_conversations(conn, settings, pairs)
        in_force = current_epochs(conn, result_source(settings))
    wanted = configured(candidate.judge_model, metrics, own_models=False)
    same = [m for m in metrics if m in in_force and in_force[m].combination == wanted[m]]
    # the candidate judges every metric, online (a shadow run never batches)
    prices = prices_for(candidate, own_models=False, online=True)
    if prices is None:
        cost, basis = None, (f"litellm has no price for {candidate.judge_model}; set "
                             "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK")
    else:
        cost = sum(estimate_pair_cost(prices, p.work.metric, input=p.work.input, output=p.work.output,
                                      context=p.work.context, max_field_chars=candidate.max_field_chars)
                   for p in pairs)
        basis = f"tokens estimated from the sampled traces' text, at {prices.source}"
    known = [p.current.cost_usd for p in pairs if p.current.cost_usd is not None]
    return ShadowPlan(
        candidate_model=candidate.judge_model, pairs=len(pairs), per_stratum=strata(pairs), cost_usd=cost,
        basis=basis, current_cost_usd=sum(known) if known else None, same_as_current=same,
    )
