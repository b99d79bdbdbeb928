"""One definition per method: its dataclass holds the defaults, its yaml only what differs
from them, nothing else in the code names a method, and old run dirs still read."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from src.algorithms import METHODS
from src.config import method_defaults, validate_method
from src.integrations._common import available_methods, load_method_yaml
from tests.conftest import REPO, compose

SRC = REPO / "src"


# Every conf/method label's whole method section, as published, written here and not read from
# the code, so that a changed default (the dataclass) or yaml value fails. Sources: docs/methods.md's
# table, and each parameter's `source=` in src/algorithms/methods/.
CLIP = {"dual_clip_c": None}  # no dual-clip unless a recipe runs one
BAPO_PAPER = {"rho0": 0.4, "low_start": 0.6, "low_max": 0.9,  # BAPO paper section 5.1: rho0,
              "high_start": 1.2, "high_max": 3.0,  # c_low in [0.6, 0.9], c_high in [1.2, 3.0],
              "high_step": 0.05, "low_step": 0.02,  # steps delta1 = 0.05, delta2 = 0.02
              "contribution": "gradient", "weights": "uniform", "order": "paper",  # Algorithm 1
              "search": "fast", "dual_clip_c": None}
PUBLISHED = {
    # the paper's GRPO baseline, eps = 0.2
    "ppo": ("ppo", "token-mean", {"c_low": 0.8, "c_high": 1.2, **CLIP}),
    # the paper's Fig. 7 asymmetric clips
    "clip_0.5_1.2": ("ppo", "token-mean", {"c_low": 0.5, "c_high": 1.2, **CLIP}),
    "clip_0.8_1.5": ("ppo", "token-mean", {"c_low": 0.8, "c_high": 1.5, **CLIP}),
    # DAPO (arXiv 2503.14476): eps_low 0.2, eps_high 0.28
    "clip_higher": ("clip_higher", "token-mean", {"c_low": 0.8, "c_high": 1.28, **CLIP}),
    # arXiv 2506.01939: DAPO's clip, the top 20% tokens by entropy
    "top_entropy": ("top_entropy", "token-mean",
                    {"c_low": 0.8, "c_high": 1.28, **CLIP, "q": 0.2, "scope": "minibatch"}),
    "bapo": ("bapo", "token-mean", BAPO_PAPER),
    "bapo_value": ("bapo", "token-mean", {**BAPO_PAPER, "contribution": "value"}),  # literal Eq. 8
    # the official verl recipe (WooooDyy/BAPO recipe/bapo): target 0.5, value contribution,
    # c_low first, [0.6, 0.8] and [1.2, 2.0], steps 0.05, verl's dual-clip 3.0
    "bapo_official": ("bapo", "token-mean", {
        "rho0": 0.5, "low_start": 0.6, "low_max": 0.8, "high_start": 1.2, "high_max": 2.0,
        "high_step": 0.05, "low_step": 0.05, "contribution": "value", "weights": "uniform",
        "order": "official", "search": "fast", "dual_clip_c": 3.0}),
    # arXiv 2507.18071 Eq. 5 and its experiments: 3e-4 and 4e-4, per-response mean
    "gspo": ("gspo", "seq-mean-token-mean", {"eps_low": 3e-4, "eps_high": 4e-4}),
    # arXiv 2506.13585 section 3.1 (no lower bound: a large eps_low); verl's CISPO example
    "cispo": ("cispo", "token-mean", {"eps_low": 10.0, "eps_high": 0.2}),
    # arXiv 2510.01161, the authors' run script: M2_budget=0.04
    "m2po": ("m2po", "token-mean", {"budget": 0.04}),
    # arXiv 2505.22617 and the authors' recipe: clip [1 - 1, 1 + 1], r = 2e-4, omega (1, 5)
    "clip_cov": ("clip_cov", "token-mean",
                 {"c_low": 0.0, "c_high": 2.0, **CLIP, "ratio": 2e-4, "lb": 1.0, "ub": 5.0}),
    # arXiv 2505.22617: k = 2e-3 (Qwen2.5-7B), beta = 1
    "kl_cov": ("kl_cov", "token-mean", {"ratio": 2e-3, "coef": 1.0}),
    # arXiv 2511.20347 as verl and TRL ship it: tau_pos 1.0, tau_neg 1.05 (verl's actor.yaml,
    # "the values used in the paper"; TRL's sapo_temperature_*), both seq-mean-token-mean
    "sapo": ("sapo", "seq-mean-token-mean", {"tau_pos": 1.0, "tau_neg": 1.05}),
    # arXiv 2602.04879, the authors' run script (verl examples/dppo_trainer/run_qwen30b_dppo.sh):
    # TV threshold 0.15 (KL 0.05) on both sides, clip_ratio_c=10000 (no truncation)
    "dppo_tv": ("dppo_tv", "token-mean",
                {"delta_low": 0.15, "delta_high": 0.15, "clip_ratio_c": 10000.0}),
    "dppo_kl": ("dppo_kl", "token-mean",
                {"delta_low": 0.05, "delta_high": 0.05, "clip_ratio_c": 10000.0}),
    # arXiv 2508.07629, KlearReasoner's math script: clip 0.2 / 0.28, clip_ratio_c 10; its
    # README: beta1 = beta2 = 1
    "gppo": ("gppo", "token-mean",
             {"c_low": 0.8, "c_high": 1.28, "dual_clip_c": 10.0, "beta1": 1.0, "beta2": 1.0}),
    # arXiv 2509.20712, KlearReasoner's general-GPPO script: gppo_loss_beta1=0.25, beta2=1.0
    "ce_gppo": ("gppo", "token-mean",
                {"c_low": 0.8, "c_high": 1.28, "dual_clip_c": 10.0, "beta1": 0.25, "beta2": 1.0}),
    # arXiv 2509.02333, lime-RL/DCPO recipe/dcpo/run_dcpo.sh: clip_type dynamic, eps 0.2 /
    # 0.28, clip_ratio_c 10
    "dcpo": ("dcpo", "token-mean", {"eps_low": 0.2, "eps_high": 0.28, "dual_clip_c": 10.0}),
    # arXiv 2510.06062, wizard-III/Archer2.0 dp_actor.py's literals: ranges 0.2 / 0.4 (top-20%
    # entropy tokens of a response) below and above, dual clips 3.0, quantile 0.8
    "aspo": ("aspo", "token-mean", {"c_low": 0.8, "c_high": 1.2, "c_low_high_entropy": 0.6,
                                    "c_high_high_entropy": 1.4, "dual_clip_neg": 3.0,
                                    "dual_clip_pos": 3.0, "entropy_quantile": 0.8}),
}


def test_every_method_label_is_published():
    assert sorted(PUBLISHED) == available_methods()


@pytest.mark.parametrize("objective", sorted(METHODS))
def test_every_method_has_its_yaml_and_its_dataclass_holds_the_published_defaults(objective):
    # The dataclass is the one place of an objective's defaults; they are the published ones
    label_objective, aggregation, params = PUBLISHED[objective]
    assert label_objective == objective
    assert dataclasses.asdict(METHODS[objective].Params()) == params
    # conf/method/<objective>.yaml pulls them in first (Hydra's method_defaults/<objective>)
    raw = yaml.safe_load((REPO / "conf" / "method" / f"{objective}.yaml").read_text())
    assert raw["defaults"] == [f"/method_defaults/{objective}@_here_", "_self_"]
    assert raw["objective"] == objective and raw["name"] == objective


@pytest.mark.parametrize("label", sorted(PUBLISHED))
def test_every_method_yaml_composes_to_the_published_values(label):
    objective, aggregation, params = PUBLISHED[label]
    expected = {"name": label, "objective": objective, "aggregation": aggregation, objective: params}
    assert load_method_yaml(label) == expected  # the plugs' reader
    composed = compose([f"method={label}"]).method.to_container()  # Hydra, as src.run
    composed.pop("traits")
    assert composed == expected


@pytest.mark.parametrize("label", available_methods())
def test_every_method_yaml_holds_only_what_differs(label):
    # from what its defaults list pulls in: the objective's dataclass, or a parent yaml
    raw = yaml.safe_load((REPO / "conf" / "method" / f"{label}.yaml").read_text())
    first, *rest = raw.pop("defaults")
    assert rest == ["_self_"]
    if first.startswith("/method_defaults/"):
        base = method_defaults(first.removeprefix("/method_defaults/").removesuffix("@_here_"))
    else:
        base = load_method_yaml(first)
    assert raw["name"] == label
    for key, value in raw.items():
        if key == raw.get("objective", base["objective"]) and isinstance(value, dict):
            same = {k: v for k, v in value.items() if base[key].get(k) == v}
            assert same == {}, f"conf/method/{label}.yaml repeats {key}: {same}"
        elif key not in ("name", "objective"):
            assert base[key] != value, f"conf/method/{label}.yaml repeats {key}: {value}"


@pytest.mark.parametrize("objective", sorted(METHODS))
def test_every_parameter_says_what_it_is(objective):
    for name, text in METHODS[objective].Params.help().items():
        assert text.strip(), f"{objective}.{name} has no help text"


@pytest.mark.parametrize("label", available_methods())
def test_every_method_yaml_validates_and_names_only_its_parameters(label):
    method = validate_method(load_method_yaml(label))
    assert method.name == label
    section = load_method_yaml(label)[method.objective]
    fields = {f.name for f in dataclasses.fields(METHODS[method.objective].Params)}
    assert set(section) <= fields
    assert compose([f"method={label}"]).method.to_container() == method.to_container()


def test_bapo_official_runs_the_recipes_dual_clip():
    assert compose(["method=bapo_official"]).method.params.dual_clip_c == 3.0


def _source_files(where: Path) -> list[Path]:
    return sorted(where.rglob("*.py"))


def test_no_code_outside_a_methods_own_file_branches_on_its_name():
    # src/: no branch on a method's name outside its own module (analysis/ has the stricter
    # test below: it names no method at all outside its claim rows)
    names = "|".join(sorted(METHODS))
    branch = re.compile(rf"""(objective|method)\S*\s*(==|!=|in)\s*[\(\[]?\s*["']({names})["']""")
    starts = re.compile(rf"""(objective|method)\S*\.startswith\(\s*["']({names})""")
    own = SRC / "algorithms" / "methods"
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}"
            for p in _source_files(SRC) if own not in p.parents
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if branch.search(line) or starts.search(line)]
    assert hits == []


# Where analysis/ may name a method: the claim rows (the paper's comparisons, declared as
# data) and the colours and order that display methods. Everything else reads what a
# method is from its traits (method.traits) or which runs to compare from the claim rows.
NAMES_ALLOWED = ("analysis/claims/paper.py", "analysis/claims/lag.py", "analysis/claims/batch.py",
                 "analysis/claims/mismatch.py", "analysis/claims/clip_family.py",
                 "analysis/claims/random_reward.py", "analysis/core/style.py")


def method_labels() -> set[str]:
    return {p.stem for p in (REPO / "conf" / "method").glob("*.yaml")}


def named_methods(source: str, labels: set[str]) -> list[tuple[int, str]]:
    """(line, label) of every string literal of `source` that is a method's label, f-string
    parts included: a selection by name (`BASE = "ppo"`, `("clip_0.8_1.5", "ppo")`,
    `r.method == "bapo"`) always holds one."""
    import ast

    return sorted((node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in labels)


def test_the_name_finder_finds_selections_by_name():
    labels = method_labels()
    assert {"ppo", "bapo", "clip_0.8_1.5"} <= labels
    found = named_methods('BASE = "ppo"\nFIG7 = ("clip_0.8_1.5", BASE)\n'
                          'x = [r for r in runs if r.method == "bapo"]\n'
                          'def f(r, m="top_entropy"): return f"{m}"\n', labels)
    assert found == [(1, "ppo"), (2, "clip_0.8_1.5"), (3, "bapo"), (4, "top_entropy")]
    assert named_methods('"""ppo and bapo, in words"""\nx = "ppo (bapo.rho0=0.3)"\n', labels) == []


def test_analysis_names_no_method_outside_its_claim_rows():
    labels = method_labels()
    hits = [f"{p.relative_to(REPO)}:{line}: {label!r}"
            for p in _source_files(REPO / "analysis")
            if str(p.relative_to(REPO)) not in NAMES_ALLOWED
            for line, label in named_methods(p.read_text(), labels)]
    assert hits == []


def test_each_method_writes_its_traits_and_old_runs_get_the_registrys():
    from analysis.core.loader import Run, registry_traits

    bapo = compose(["method=bapo_value"]).method.to_container()
    assert bapo["traits"] == METHODS["bapo"].traits.to_config()
    assert bapo["traits"]["adaptive_bounds"] and not METHODS["ppo"].traits.adaptive_bounds
    old = Run("r", Path("r"), "smoke", "bapo_value", 2, 0, "finished",
              {"method": {"name": "bapo_value", "objective": "bapo"}}, [0], [])
    assert old.traits == registry_traits("bapo") == METHODS["bapo"].traits
    new = Run("r", Path("r"), "smoke", "x", 2, 0, "finished",
              {"method": {"name": "x", "objective": "x", "traits": bapo["traits"]}}, [0], [])
    assert new.traits == METHODS["bapo"].traits


def test_old_runs_of_an_earlier_definition_under_the_same_name_get_no_traits():
    # m2po's runs made before it became the authors' clip (experiments/results/staleness_4x/
    # m2po) hold its masking rule's `tau` and no traits: they get none, not today's bounds
    from analysis.core.loader import Run
    from analysis.core.search_outcomes import searches_bounds
    from src.run_vocab import MethodTraits

    def run(params):
        return Run("r", Path("r"), "staleness_4x", "m2po", 4, 0, "finished",
                   {"method": {"name": "m2po", "objective": "m2po", "m2po": params}}, [0], [])

    assert run({"tau": 0.04}).traits == MethodTraits()
    today = run({"budget": 0.04})
    assert today.traits == METHODS["m2po"].traits and today.traits.adaptive_bounds
    # its bounds are adaptive, but solved, not searched: bapo's search tables leave it out
    assert not searches_bounds(today)


def test_bapos_traits_name_the_numbers_its_decision_logs():
    import torch

    traits = METHODS["bapo"].traits
    method = METHODS["bapo"]()
    logp = torch.zeros(1, 3)
    record = method.decide(method.decision_inputs(logp, logp, torch.tensor([1.0]),
                                                  torch.ones(1, 3, dtype=torch.bool))).record
    keys = (traits.measure, traits.measure_at_start, traits.moved, traits.reached, traits.undefined)
    assert set(keys) <= set(record)


def test_plugs_reach_neither_into_the_trainer_nor_into_run_internals():
    for p in _source_files(SRC / "integrations"):
        text = p.read_text()
        assert "src.trainer" not in text, p
        assert not re.search(r"from src\.run import _|src\.run\._", text), p


def test_old_layout_configs_read_as_todays():
    """Configs of run dirs made before methods owned their parameters (the staleness_4x
    seed-0 configs of the earlier AdamW reproduction, kept in tests/data) read as the
    method's yaml today; only bapo_official differs, by the recipe's dual-clip it now has."""
    from src.config import to_container
    from src.run_dir import config_differences, stored_config
    from src.run_vocab import ADDED_SECTIONS, flatten

    runs = sorted((REPO / "tests" / "data" / "old_layout_runs").glob("*"))
    assert len(runs) == 8
    for run_dir in runs:
        raw = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert "c_low" in raw["method"]  # the old layout
        upgraded = stored_config(run_dir)
        # sections added since read as the values those runs used
        assert flatten({k: upgraded[k] for k in ADDED_SECTIONS}).items() >= flatten(ADDED_SECTIONS).items()
        name = upgraded["method"]["name"]
        today = to_container(compose([f"method={name}"]))["method"]
        today.pop("traits")  # derived from the objective, never stored by old runs
        diffs = config_differences(upgraded["method"], today)
        expected = [("bapo.dual_clip_c", None, 3.0)] if name == "bapo_official" else []
        assert diffs == expected, run_dir
