"""What the project knows about one serving engine, as one model. Pure code.

Each engine module of this package (vllm.py, sglang.py, atom.py, sim.py) builds one
EngineSpec named ENGINE; the registry finds them. Everything here is data or a pure
function of data: probing an interpreter or starting a server is the resources' job
(resources/hosts/engines.py), which reads these specs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from hyperloom_assets.core.models import Frozen

# argparse's own words for a rejected argv (docs/design.md, invariant 7). Every engine here parses its
# command line with argparse, so every engine shares them.
ARGPARSE_ERRORS: tuple[str, ...] = ("unrecognized arguments", "invalid choice")
GRIDS_DIR = Path(__file__).parent / "grids"
# Names the package the server's reporter (resources/hosts/engine_origin) watches for.
ENGINE_PACKAGE_ENV = "HYPERLOOM_ENGINE_PACKAGE"

EvidenceParser = Callable[[str], "dict[str, Any] | None"]
# (requested args, launch evidence, engine version or None) -> why the cache was off, or None.
PrefixCacheRule = Callable[[list[str], "dict[str, Any] | None", "str | None"], "str | None"]
CacheDirs = Callable[[Mapping[str, str]], list[Path]]
# (server args) -> how many times faster than its engine's own time the server runs.
TimeScale = Callable[[list[str]], float]
# (server args) -> the GPU and tensor-parallel size the args name, for an engine with no card to detect.
NamedGpu = Callable[[list[str]], "tuple[str, int] | None"]
# (engine version, server args) -> what tells this engine's launches apart in the launch-noise history.
NoiseIdentity = Callable[[str, list[str]], str]
# What predicts a stand-in's numbers (its model and calibration), for run metadata and reports.
Predictor = Callable[[list[str]], "str | None"]
# What is wrong with a stand-in's harness flags in a target's server_args, each naming its flag.
HarnessProblems = Callable[[list[str]], "list[str]"]


def no_evidence(log_text: str) -> dict[str, Any] | None:
    """For an engine that logs no record of its resolved args."""
    return None


def no_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    return []


def real_time(server_args: list[str]) -> float:
    """A real engine's numbers are in its own time."""
    return 1.0


def no_named_gpu(server_args: list[str]) -> tuple[str, int] | None:
    """A real engine runs on the card the host has."""
    return None


def measured(server_args: list[str]) -> str | None:
    """A real engine's numbers are measured, not predicted."""
    return None


def no_harness_problems(server_args: list[str]) -> list[str]:
    return []


def version_only(version: str, server_args: list[str]) -> str:
    return version


def home_of(env: Mapping[str, str]) -> Path:
    """The server's home folder: its HOME, else this process's."""
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


class Entry(Frozen):
    """How a server starts: `python -m module subcommand...`."""
    module: str
    subcommand: tuple[str, ...] = ()


class Distribution(Frozen):
    """A distribution that can serve the engine, and how to tell the real one.

    `ships` is a file the engine's own package installs (relative to site-packages):
    a distribution of the same name that lacks it is another project (PyPI's `atom` is
    not ROCm's ATOM), never the engine.
    """
    name: str
    ships: str
    entry: Entry | None = None  # its own entry module, when it is not the engine's


class CliParser(Frozen):
    """How the engine builds its own argparse parser: `builder(parser_class(), *args)`.

    Both are `module:attribute` paths in the serving interpreter; the builder returns the
    parser or fills the one it is given. The proposer's guard runs argv through it.
    """
    parser_class: str = "argparse:ArgumentParser"
    builder: str


class Startup(Frozen):
    """How long readiness may take: `cold_s` until the engine's caches hold something."""
    cold_s: float
    warm_s: float | None = None
    cache_dirs: CacheDirs = no_cache_dirs

    def timeout_s(self, env: Mapping[str, str] | None = None) -> float:
        env = os.environ if env is None else env
        if self.warm_s is not None and any(p.is_dir() and any(p.iterdir()) for p in self.cache_dirs(env)):
            return self.warm_s
        return self.cold_s


class AccuracyRisk(Frozen):
    """A flag or env var whose change can change what the model answers.

    `safe_values` keep the numerics the baseline has (`auto`: the model's own dtype);
    any other value, or a boolean flag given at all, is a risk.
    """
    knob: str
    why: str
    safe_values: tuple[str, ...] = ()


class Series(Frozen):
    """One Prometheus series of an engine's `/metrics`; samples whose labels match `labels` count.

    Several matching samples (one per engine core, one per label value) are summed, or
    for a usage share the fullest is taken.
    """
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0  # to the project's unit (a 0..1 share times 100 is percent)
    combine: Literal["sum", "max"] = "sum"


class MetricNames(Frozen):
    """Where an engine's `/metrics` states what the planner reads (docs/design.md, Measurement protocol 7).

    Gauges are sampled during the measured rounds; counters are read as their increase
    over them. A series the engine does not expose (or only behind an option) is None.
    """
    kv_usage_pct: Series  # gauge: share of the KV pool in use, percent
    preemptions: Series  # counter: requests preempted (vLLM) or retracted (SGLang)
    running: Series  # gauge: requests in the running batch
    waiting: Series  # gauge: requests queued for admission
    prefix_queries: Series  # counter: prompt tokens looked up in the prefix cache
    prefix_hits: Series  # counter: of those, tokens found cached
    prefill_s: Series | None = None  # counter: seconds in prefill
    decode_s: Series | None = None  # counter: seconds in decode


# (trace folder on the serving host) -> what the server needs to profile into it.
ProfilerArgs = Callable[[str], list[str]]
ProfilerEnv = Callable[[str], dict[str, str]]


def no_profiler_env(trace_dir: str) -> dict[str, str]:
    return {}


class ProfileSource(Frozen):
    """How the proposer's evidence and the report name what took a profile (`{engine}`: the
    engine's name), and the unit of the times it recorded."""
    evidence: str = "{engine} torch profiler"
    report: str = "{engine}'s torch profiler"
    time_unit: str = "ms"


class Profiler(Frozen):
    """How the engine's own profiler is switched on and driven over HTTP.

    The server starts with `server_args(dir)` and `env(dir)` on top of the running
    configuration; a POST to `start_path` begins recording and a POST to `stop_path`
    ends it, after which the engine has written `trace_glob` files (Chrome trace JSON,
    gzipped or not) under the folder.
    """
    server_args: ProfilerArgs
    env: ProfilerEnv = no_profiler_env
    start_path: str = "/start_profile"
    stop_path: str = "/stop_profile"
    trace_glob: str = "**/*.pt.trace.json*"
    stop_timeout_s: float = 300.0  # writing a trace takes a while on a busy host
    # Configured but idle, it leaves the measured rounds alone, as benchmarks/profiler_configured.py
    # shows for this engine ("not slowed": a slowdown over its margin ruled out): then the
    # baseline's own server carries it and the profile costs no launch. Unshown, the profile
    # takes a launch of its own, so the anchor is never in doubt. tests/unit/
    # test_profiler_evidence.py holds this flag to the engine's committed result.
    free_when_idle: bool = False
    # Warm-up rounds before recording, so compile caches and allocators have settled.
    warms_up: bool = True
    source: ProfileSource = ProfileSource()

    def flags(self) -> frozenset[str]:
        """The flags `server_args` adds: the harness's, never part of a config (docs/design.md, invariant 3)."""
        return frozenset(token for token in self.server_args("") if token.startswith("--"))


class DeviceFlags(Frozen):
    """The flags that set how many accelerators one server takes: their sizes multiply
    (core/fleet/slots.py). Each tuple is one size's spellings, first the canonical one.

    `data_within_tensor`: a flag under which data parallelism splits the tensor-parallel
    group's own devices instead of adding its own (SGLang's DP attention)."""
    tensor: tuple[str, ...] = ()
    pipeline: tuple[str, ...] = ()
    data: tuple[str, ...] = ()
    data_within_tensor: str | None = None

    def flags(self) -> frozenset[str]:
        return frozenset({*self.tensor, *self.pipeline, *self.data,
                          *((self.data_within_tensor,) if self.data_within_tensor else ())})


class EngineSpec(Frozen):
    name: str
    listed_at: int  # its place in the lists users read (errors, `targets check`)
    entry: Entry
    model_flag: str
    port_flag: str  # the HTTP port
    serve_flags: tuple[str, ...] = ("--host", "127.0.0.1")
    # Env the harness gives every launch so the engine reports what we read (the operator's
    # env and the host's own win); like serve_flags, never part of a config or a candidate.
    serve_env: tuple[tuple[str, str], ...] = ()
    # Env by which the engine binds its compute threads to CPUs itself, and the values under
    # which it binds them within its process's CPU mask, the default first. A pinned server
    # (resources/hosts/cpu_pinning.py) whose env names CPUs there gets that default instead:
    # its threads would otherwise leave the CPUs it was given (another slot's, the client's).
    cpu_bind_env: str | None = None
    cpu_bind_within_mask: tuple[str, ...] = ()
    # Env naming where the engine leaves files a killed server never removes (IPC sockets):
    # each launch points them at a folder of its own, deleted with its process group.
    scratch_env: tuple[str, ...] = ()
    # Compiles each batch shape the first time it meets one, so a warm-up must fill the batch
    # (core/measurement/workloads.py default_warmups).
    compiles_on_first_use: bool = False
    launcher_aliases: tuple[str, ...] = ()  # other spellings of the model and port flags
    # Commands that start a server without `-m` (program name, then the words after it).
    console_commands: tuple[tuple[str, ...], ...] = ()
    distributions: tuple[Distribution, ...]
    release_distribution: str | None  # polled on the package index; None: not published there
    cpu_release_distribution: str | None = None  # the CPU build's own distribution
    source_import_root: str  # where `import <engine>` resolves inside a source checkout
    package: str  # the top-level package a server imports: what a launch from a tree must find in it
    parse_evidence: EvidenceParser = no_evidence
    prefix_cache_off: PrefixCacheRule
    fatal_markers: tuple[str, ...]
    argv_error_markers: tuple[str, ...] = ARGPARSE_ERRORS
    health_path: str = "/health"
    startup: Startup
    accuracy_risks: tuple[AccuracyRisk, ...] = ()
    env_prefixes: tuple[str, ...]
    # Env it reads from its host beyond its knobs (a stand-in's test switches): its servers
    # inherit these and `env_prefixes`, besides the platform's (core/fleet/serving_env.py).
    host_env_prefixes: tuple[str, ...] = ()
    boolean_flags: frozenset[str] = frozenset()
    multi_value_flags: frozenset[str] = frozenset()  # argparse nargs="+": every following non-flag token
    sequence_cap_key: str | None = None  # where its launch record states the resolved cap
    grid: str | None = None  # its seed grid, a file of GRIDS_DIR
    # A stand-in engine speaks another engine's flags: which one, from its args.
    flavor_of: Callable[[list[str]], str] | None = None
    harness_flags: frozenset[str] = frozenset()  # flags that drive the stand-in, not the engine
    port_flag_of: Callable[[list[str]], str] | None = None  # a stand-in's port flag by flavor
    # The flags a stand-in's parser takes for a flavor (it implements a subset and
    # rejects the rest); None for a real engine, whose grid is checked against its source.
    accepted_flags_of: Callable[[str | None], frozenset[str]] | None = None
    # A stand-in's harness flags say what a real engine's host decides: the time its numbers
    # are in, the GPU it models, and what its launch noise depends on.
    time_scale_of: TimeScale = real_time
    named_gpu: NamedGpu = no_named_gpu
    noise_identity: NoiseIdentity = version_only
    predictor_of: Predictor = measured
    harness_problems: HarnessProblems = no_harness_problems
    metrics: MetricNames | None = None  # its Prometheus `/metrics`, where it has one
    cli_parser: CliParser | None = None  # its own argv parser; None: no proposed argv can be checked
    # Source files a model proposing patches is shown (package-relative), within a size bound.
    source_context: tuple[str, ...] = ()
    profiler: Profiler | None = None  # its own profiler; None: no profile can be taken
    devices: DeviceFlags = DeviceFlags()  # how many accelerators a server takes; none: one

    def inherited_prefixes(self) -> tuple[str, ...]:
        """The prefixes of the host's variables its servers inherit (core/fleet/serving_env.py)."""
        return self.env_prefixes + self.host_env_prefixes

    def profile_source(self) -> ProfileSource:
        return self.profiler.source if self.profiler else ProfileSource()

    def import_root(self, tree: Path) -> Path:
        """The folder of a checkout that goes first on the server's PYTHONPATH."""
        return Path(tree) / self.source_import_root

    def tree_env(self, tree: Path, inherited_pythonpath: str | None, reporter_dir: Path) -> dict[str, str]:
        """The env that makes a server import this engine from `tree`.

        The reporter folder (a sitecustomize that logs where the package came from) goes
        first so the tree cannot shadow it; the tree's import root next, ahead of
        site-packages; whatever PYTHONPATH the server inherited stays after them.
        PYTHONSAFEPATH keeps `python -m` from putting the cwd first, where a checkout of
        the same package (this project's, for the sim) would win over the tree.
        """
        parts = [str(reporter_dir), str(self.import_root(tree))]
        if inherited_pythonpath:
            parts.append(inherited_pythonpath)
        return {"PYTHONPATH": os.pathsep.join(parts), "PYTHONSAFEPATH": "1", ENGINE_PACKAGE_ENV: self.package}

    def launcher_flags(self) -> frozenset[str]:
        """Flags the launcher sets for every server: never candidates, never ablated."""
        serve = {flag for flag in self.serve_flags if flag.startswith("--")}
        return frozenset({self.model_flag, self.port_flag, *self.launcher_aliases, *serve})

    def entry_for(self, distribution: str | None) -> Entry:
        """The entry a found distribution starts from (the engine's, unless it has its own)."""
        for candidate in self.distributions:
            if candidate.name == distribution and candidate.entry is not None:
                return candidate.entry
        return self.entry

    def has_distribution_entries(self) -> bool:
        return any(d.entry is not None for d in self.distributions)

    def build_argv(self, python: Path, model: Path, port: int, server_args: list[str],
                   entry: Entry | None = None) -> list[str]:
        """The whole command: a module run by an explicit interpreter, the operator's args last."""
        entry = entry or self.entry
        port_flag = self.port_flag_of(server_args) if self.port_flag_of else self.port_flag
        return [str(python), "-m", entry.module, *entry.subcommand, self.model_flag, str(model),
                port_flag, str(port), *self.serve_flags, *server_args]

    def server_args_of(self, argv: list[str]) -> list[str] | None:
        """The operator's args of a command `build_argv` built (a launcher before it allowed); None
        where argv is not one: no model flag, or no port or serve flags where they belong."""
        if self.model_flag not in argv:
            return None
        at = argv.index(self.model_flag) + 2
        port, serve = argv[at:at + 2], list(self.serve_flags)
        if len(port) < 2 or not port[1].isdigit() or argv[at + 2:at + 2 + len(serve)] != serve:
            return None
        return argv[at + 2 + len(serve):]

    def served_model(self, model: Path | str, server_args: list[str]) -> str:
        """The name requests must use: `--served-model-name` if given, else the model path."""
        for index, token in enumerate(server_args):
            if token == "--served-model-name" and index + 1 < len(server_args):
                return server_args[index + 1]
            if token.startswith("--served-model-name="):
                return token.split("=", 1)[1]
        return str(model)

    def argv_error(self, log_text: str) -> str | None:
        """The argparse marker in the log, when the engine rejected its argv."""
        return next((marker for marker in self.argv_error_markers if marker in log_text), None)

    def fatal(self, log_text: str) -> str | None:
        return next((marker for marker in self.fatal_markers if marker in log_text), None)

    def grid_path(self, folder: Path = GRIDS_DIR) -> Path | None:
        return folder / self.grid if self.grid else None

    def serving_commands(self) -> set[tuple[str, ...]]:
        """What a serving process's cmdline holds: each entry's module and subcommand, or a console command."""
        entries = [self.entry, *(d.entry for d in self.distributions if d.entry)]
        return {(e.module, *e.subcommand) for e in entries} | set(self.console_commands)


class Installed(Frozen):
    """A distribution of an engine found in an interpreter's environment."""
    distribution: str
    version: str
    genuine: bool  # it ships the engine's own file, so it is the engine and not a namesake

    def identity(self, spec: EngineSpec) -> str:
        """`distribution version`, saying so when the name matched but the package is another."""
        text = f"{self.distribution} {self.version}"
        if self.genuine:
            return text
        ships = next((d.ships for d in spec.distributions if d.name == self.distribution), "its entry module")
        return f"{text} (not the {spec.name} engine: it lacks {ships})"
