"""The climb's accuracy gate on sim servers: a side whose answers were asked of a server
already up is not launched again; a side without them gets a launch of its own."""

from __future__ import annotations

from contextlib import nullcontext

from hyperloom_assets.core.config.targets import AgreementCheck
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.decisions.climb import BASELINE
from hyperloom_assets.resources.accuracy.launch_gate import LaunchGate
from tests.conftest import SIM_MODEL

SPEC = ServerSpec(engine="sim", model=SIM_MODEL, server_args=["--gpu", "H100", "--time-scale", "50"])
# The sim alters its outputs when a flag --alter-outputs-with names is among its engine args.
WRONG = SPEC.model_copy(update={"server_args": [*SPEC.server_args, "--alter-outputs-with", "max-num-seqs",
                                               "--max-num-seqs", "8"]})


def test_answers_asked_after_the_rounds_spare_the_gate_its_launches(tmp_path, host) -> None:
    gate = LaunchGate(host, AgreementCheck(), tmp_path / "accuracy", spec_for=None)
    with host.serve(SPEC, tmp_path / "trial") as launch:  # a risky variant's trial launch, its rounds over
        gate.ask_on("variant-a")(launch)
    assert gate.ask_on("variant-a") is None, "answers already kept are not asked again"

    verdict, why = gate.judge(BASELINE, lambda: nullcontext(SPEC), "variant-a", lambda: nullcontext(SPEC))
    assert (verdict, gate.launched) == ("pass", ["reference"]), why  # the baseline had no answers

    verdict, why = gate.judge(BASELINE, lambda: nullcontext(SPEC), "variant-b", lambda: nullcontext(WRONG))
    assert (verdict, gate.launched) == ("drop", ["reference", "candidate"]), why  # the reference is kept


def test_the_baselines_answers_are_the_first_reference(tmp_path, host) -> None:
    with host.serve(SPEC, tmp_path / "baseline") as launch:
        probe = LaunchGate(host, AgreementCheck(), tmp_path / "probe", spec_for=None)
        probe.ask_on(BASELINE)(launch)
    gate = LaunchGate(host, AgreementCheck(), tmp_path / "accuracy", spec_for=None,
                      baseline_answers=probe.answers[BASELINE])
    verdict, why = gate.judge(BASELINE, lambda: nullcontext(SPEC), "variant-a", lambda: nullcontext(SPEC))
    assert (verdict, gate.launched) == ("pass", ["candidate"]), why
