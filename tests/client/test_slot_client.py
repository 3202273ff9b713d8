"""A slot's benchmark client runs as a process of its own (resources/hosts/local.py, agent_call.py): the
clients of a run's slots at once share no interpreter, so no GIL, whatever the launches in flight."""

import os

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.fleet.slots import Slot
from hyperloom_assets.core.measurement.serving import ServerError
from hyperloom_assets.resources.bench import client
from hyperloom_assets.resources.bench.client import BenchmarkClient, BenchRunError
from hyperloom_assets.resources.hosts.local import LocalHost

WORKLOAD = Workload(kind="random", isl=8, osl=4, concurrency=2, num_prompts=4)


def in_this_process_only(*args, **kwargs):
    raise AssertionError(f"the client ran in the run's own process (pid {os.getpid()})")


def test_a_slots_client_measures_in_a_process_of_its_own_and_reports_its_rounds(echo_server, tmp_path,
                                                                                  monkeypatch) -> None:
    # Mutation: LocalHost.measure calling bench.measure on a slot too runs every slot's client as a
    # thread of the run's one process, where this stand-in for the in-process client refuses it.
    url = echo_server("--token-delay-ms", "1")
    monkeypatch.setattr(client, "measure", in_this_process_only)
    slot = Slot(host="box", devices=(1,)).model_dump(mode="json")
    host = LocalHost(name="box", state_dir=str(tmp_path / "state"), slot=slot)
    rounds: list[str] = []
    m = host.measure(BenchmarkClient(), url, "echo", WORKLOAD, 100, repeats=2, warmups=1,
                     records_dir=tmp_path / "records", progress=lambda p: rounds.append(p.label))
    assert m.completed == 4 and len(m.repeats) == 2
    assert {"warm-up", "repeat-1", "repeat-2"} <= set(rounds), rounds
    assert any((tmp_path / "records").iterdir()), "its request records where the step asked"
    with pytest.raises(AssertionError, match="in the run's own process"):
        LocalHost(name="box", state_dir=str(tmp_path / "state")).measure(BenchmarkClient(), url, "echo", WORKLOAD,
                                                                          100, repeats=1)


def test_a_slots_client_failure_crosses_back_as_the_in_process_client_raises_it(echo_server, tmp_path) -> None:
    slot = Slot(host="box", devices=(0,)).model_dump(mode="json")
    host = LocalHost(name="box", state_dir=str(tmp_path / "state"), slot=slot)
    with pytest.raises(BenchRunError, match="no usage") as failed:
        host.measure(BenchmarkClient(), echo_server("--no-usage"), "echo", WORKLOAD, 100, repeats=1, warmups=0,
                     records_dir=tmp_path / "records")
    assert isinstance(failed.value, ServerError) and failed.value.error_class == "bad_response", \
        "a round's failed requests, a ServerError a trial records FAILED with, as in the run's own process"
