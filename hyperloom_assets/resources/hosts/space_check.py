"""A target's search_space against the engine's own parser, on the host that serves it.

The same check a model's proposals get (proposal_checks.py: parser_probe.py in the
serving interpreter): every flag must be one the parser registers, spelled in full (an
abbreviation argparse would take is still a typo here), and every value must parse. Run
by `hyperloom targets check` and by the baseline before its first launch.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from hyperloom_assets.core.config.problems import TargetProblem
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.core.planning.variants import setting_key
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.proposal_checks import checks_request

FIELD = "search_space.args"
PROBE_ERRORS = (ServerError, ValueError, RuntimeError, OSError)  # a host that could not be asked


def space_problems(target: Target, host: Host, file: str, python: Path | None = None) -> list[TargetProblem]:
    """What the engine's parser refuses of the target's search_space; none when it takes all of it.

    `python`: the interpreter that will serve (a release run's); default the host's for the engine.
    """
    return spaces_problems([(target, host, file)], python)[0]


def spaces_problems(asked: list[tuple[Target, Host, str]], python: Path | None = None,
                    unasked_is_a_problem: bool = False) -> list[list[TargetProblem]]:
    """space_problems of each (target, host, file), in order, with one probe per host and parser:
    a probe imports the engine in the serving interpreter, seconds each, and a folder's targets
    mostly share a host and an engine. A probe that raises raises, unless `unasked_is_a_problem`:
    then each of its targets gets that as its problem."""
    groups: dict[tuple[str, str], tuple[Host, dict, list[int]]] = {}
    argvs_of: dict[int, list[list[str]]] = {}
    for index, (target, host, _) in enumerate(asked):
        space = target.search_space
        if space is None or not space.args:
            continue
        spec = ServerSpec(engine=target.engine, model=target.model, server_args=target.server_args, python=python)
        request = checks_request(engine_for(target.engine), target.server_args, str(host.python_executable(spec)), [])
        argvs_of[index] = space.argvs()
        key = (host.name, json.dumps(request, sort_keys=True))
        groups.setdefault(key, (host, request, []))[2].append(index)
    problems: list[list[TargetProblem]] = [[] for _ in asked]
    for host, request, members in groups.values():
        argvs = [argv for index in members for argv in argvs_of[index]]
        try:
            probe = host.proposal_checks({**request, "probe": {**request["probe"], "argvs": argvs}})["probe"]
        except PROBE_ERRORS as error:
            if not unasked_is_a_problem:
                raise
            for index in members:
                target, _, file = asked[index]
                problems[index] = [TargetProblem(file=file, field=FIELD, expected=(
                    f"flags the {target.engine} parser on host {target.host!r} takes; it could not be asked: {error}"))]
            continue
        errors = iter(probe.get("errors") or [])
        for index in members:
            target, _, file = asked[index]
            where = f"the {target.engine} parser of host {target.host!r} ({request['python']})"
            own = [next(errors, None) for _ in argvs_of[index]]
            problems[index] = _verdict(file, where, argvs_of[index], {**probe, "errors": own})
    return problems


def _verdict(file: str, where: str, argvs: list[list[str]], probe: dict) -> list[TargetProblem]:
    if probe.get("parser_error"):
        return [TargetProblem(file=file, field=FIELD, expected=f"flags {where} takes, but it could not be built "
                                                                f"there: {probe['parser_error']}")]
    return _refusals(file, where, argvs, probe)


def _refusals(file: str, where: str, argvs: list[list[str]], probe: dict) -> list[TargetProblem]:
    known = sorted({setting_key(flag) for action in probe["flags"] for flag in action["flags"]})
    problems, reported = [], set()
    for argv, error in zip(argvs, probe["errors"]):
        flag = argv[0]
        if flag in reported:
            continue
        if setting_key(flag) not in known:
            near = difflib.get_close_matches(setting_key(flag), known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            problems.append(TargetProblem(file=file, field=f"{FIELD}.{flag}", expected=f"a flag of {where}: it has "
                                                                                        f"no {flag}{hint}"))
            reported.add(flag)
        elif error:
            problems.append(TargetProblem(file=file, field=f"{FIELD}.{flag}",
                                          expected=f"values {where} takes: {' '.join(argv)} is refused: {error}"))
    return problems
