"""A target's search_space against the engine's own parser, on the host that serves it.

The same check a model's proposals get (proposal_checks.py: parser_probe.py in the
serving interpreter): every flag must be one the parser registers, spelled in full (an
abbreviation argparse would take is still a typo here), and every value must parse. Run
by `hyperloom targets check` and by the baseline before its first launch.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from hyperloom_assets.core.config.targets import Target, TargetProblem
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.planning.variants import setting_key
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.proposal_checks import checks_request

FIELD = "search_space.args"


def space_problems(target: Target, host: Host, file: str, python: Path | None = None) -> list[TargetProblem]:
    """What the engine's parser refuses of the target's search_space; none when it takes all of it.

    `python`: the interpreter that will serve (a release run's); default the host's for the engine.
    """
    space = target.search_space
    if space is None or not space.args:
        return []
    spec = ServerSpec(engine=target.engine, model=target.model, server_args=target.server_args, python=python)
    python = str(host.python_executable(spec))
    argvs = space.argvs()
    reply = host.proposal_checks(checks_request(engine_for(target.engine), target.server_args, python, argvs))
    probe = reply["probe"]
    where = f"the {target.engine} parser of host {target.host!r} ({python})"
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
