"""Rule coverage: does each rule fire on real models?

`coverage(rules, models)` runs every model of a corpus through `cuvil.optimize` with the
given rules and gathers, per rule, its matches (summed over models), whether it is in an
extracted graph, and the models where it fired. The default corpus is every `cuvil.zoo`
model plus the probe models of `cuvil/cli/probes.py`, small models written for the forms
the zoo lacks (a decomposed layer norm, attention written out, conv + batch norm, ...);
a probe may be optimized for its own targets (the placement probe: `cuda` and `cpu`).

A model is named by a spec: `zoo:NAME`, `probe:NAME`, a `.pt2` file or
`package.module:factory` (see `cuvil/cli/models.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuvil.errors import CuvilError


@dataclass
class RuleCoverage:
    label: str
    where: str
    matches: int = 0
    in_result: bool = False
    models: list[str] = field(default_factory=list)

    @property
    def fired(self) -> bool:
        return self.matches > 0


@dataclass
class CoverageReport:
    rules: list[RuleCoverage] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (model, error)

    @property
    def fired(self) -> list[RuleCoverage]:
        return [r for r in self.rules if r.fired]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.fired) / len(self.rules) if self.rules else 100.0

    def table(self) -> str:
        width = max([len(r.label) for r in self.rules] + [4])
        lines = [f"{'rule':<{width}}  {'matches':>7}  in result  fired on"]
        for r in self.rules:
            where = ", ".join(r.models) if r.models else "-"
            lines.append(f"{r.label:<{width}}  {r.matches:>7}  {'yes' if r.in_result else 'no':<9}"
                         f"  {where}  ({r.where})")
        return "\n".join(lines)

    def summary(self) -> str:
        text = (f"{len(self.fired)} of {len(self.rules)} rules fired ({self.percent:.1f}%) "
                f"on {len(self.models)} models")
        return text + (f"; {len(self.failed)} models failed" if self.failed else "")

    def __str__(self) -> str:
        failed = [f"model {name} failed: {error}" for name, error in self.failed]
        return "\n".join([self.table(), *failed, self.summary()])


def default_models() -> list[str]:
    from cuvil import zoo
    from cuvil.cli import probes

    return [f"zoo:{name}" for name in zoo.MODELS] + [f"probe:{name}" for name in probes.PROBES]


def load_spec(spec: str) -> tuple[Any, tuple]:
    """`(model or graph, example_inputs)` of a model spec."""
    if spec.startswith("probe:"):
        from cuvil.cli import probes

        return probes.get(spec[len("probe:"):])
    from cuvil.cli.models import load_model

    return load_model(spec)


def spec_targets(spec: str) -> tuple[str, ...]:
    """The targets a model spec is optimized for: a probe's own (`probes.TARGETS`, the
    placement probe's `cuda` and `cpu`), else the CPU."""
    if spec.startswith("probe:"):
        from cuvil.cli import probes

        return probes.TARGETS.get(spec[len("probe:"):], ("cpu",))
    return ("cpu",)


def coverage(rules: Any = None, models: Sequence[str] | None = None, *,
             disable: Sequence[str] = (), limits: Any = None,
             on_model: Callable[[str, Any], None] | None = None) -> CoverageReport:
    """Optimize every model of the corpus with `rules` and say which rules fired where.

    `rules` is anything `cuvil.library.load` takes (default: the stock library); `models`
    are specs (default: `default_models()`). A model that fails to load or optimize is
    listed in `report.failed`; `on_model(spec, graph_or_None)` follows progress. The
    rules are used unverified (`verify=False`): coverage computes no model's results, and
    `cuvil rules verify` is the check of their soundness."""
    from cuvil.library import load
    from cuvil.pipeline import optimize

    library = load(rules).without(tuple(disable))
    report = CoverageReport(rules=[RuleCoverage(r.label, r.where) for r in library.rules])
    by_label = {r.label: r for r in report.rules}
    for spec in models if models is not None else default_models():
        try:
            model, inputs = load_spec(spec)
            graph = optimize(model, inputs or None, rules=rules, disable=disable, limits=limits,
                             target=spec_targets(spec), verify=False)
        except CuvilError as e:
            report.failed.append((spec, str(e)))
            if on_model:
                on_model(spec, None)
            continue
        report.models.append(spec)
        for label, stat in graph.report.rules.items():
            row = by_label.get(label)
            if row is not None and stat.matches:
                row.matches += stat.matches
                row.in_result |= stat.in_result
                row.models.append(spec)
        if on_model:
            on_model(spec, graph)
    return report
