"""What the offline critic refuses in a patch's Python, decided on the syntax tree. Pure code.

A performance patch changes arithmetic and scheduling. What a served patch could do
beyond that (read a credential from the environment, a file or the network, start a
process, or reach any of these through a name the critic cannot read) is refused by
rule, whatever the spelling: `__import__("o"+"s")` is an import the critic cannot read,
`getattr(module, name)` an attribute it cannot read. Only the nodes that touch a changed
line are judged (code_regions.py says which lines changed), so what the file did before
is not the patch's doing.

Names are resolved as far as the parsed text shows: an import in it binds its name to its
module (`from subprocess import run as go` makes `go` subprocess.run); otherwise the
conventional names of modules (`os`, `sys`, `subprocess`, `torch`, ...) count as those
modules unless the text binds them to something else. An alias bound outside the parsed
text stays unknown, so the attributes that act on the outside world are also refused by
name on any object (`x.system`, `x.environ`, `x.read_text`).
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from typing import NamedTuple

# Importing any of these, or a submodule, is `denied_import`; using one already bound
# falls under its rule. os (and posix/nt, its platform halves) is judged by attribute.
DENIED_MODULES: dict[str, str] = {
    **dict.fromkeys(("subprocess", "_posixsubprocess", "multiprocessing", "pty", "signal", "pexpect", "sh", "plumbum",
                     "psutil", "concurrent.futures.process", "asyncio.subprocess"), "process_control"),
    **dict.fromkeys(("socket", "_socket", "ssl", "_ssl", "socketserver", "http", "urllib", "urllib3", "requests",
                     "aiohttp", "httpx", "websockets", "websocket", "grpc", "zmq", "ftplib", "smtplib", "poplib",
                     "imaplib", "telnetlib", "nntplib", "xmlrpc", "webbrowser", "wsgiref", "paramiko", "fabric",
                     "asyncssh", "select", "selectors"), "network_access"),
    **dict.fromkeys(("shutil", "io", "_io", "pathlib", "tempfile", "glob", "fileinput", "filecmp", "zipfile",
                     "tarfile", "gzip", "bz2", "lzma", "shelve", "dbm", "sqlite3", "codecs", "mmap", "fcntl",
                     "termios", "netrc", "getpass", "pwd", "grp", "spwd", "keyring", "dotenv", "logging.handlers",
                     "logging.config"), "file_access"),
    **dict.fromkeys(("importlib", "imp", "zipimport", "pkgutil", "runpy", "builtins", "__builtin__", "site"),
                    "dynamic_import"),
    **dict.fromkeys(("ctypes", "_ctypes", "cffi", "pickle", "_pickle", "cPickle", "marshal", "dill", "cloudpickle",
                     "joblib", "jsonpickle", "copyreg", "code", "codeop", "pdb", "bdb", "timeit", "doctest", "trace"),
                    "dynamic_code"),
    "inspect": "dynamic_attribute",
}
OS_FAMILY = frozenset({"os", "posix", "nt"})
# os's attributes a performance patch may use: how many cores, which ones, pure path strings.
OS_ALLOWED = frozenset({"cpu_count", "process_cpu_count", "sched_getaffinity", "sched_setaffinity", "getpid",
                        "getppid", "sep", "linesep", "pathsep", "name", "curdir", "pardir", "extsep", "altsep",
                        "path", "fspath", "PathLike", "urandom", "sysconf"})
OS_PATH_ALLOWED = frozenset({"join", "basename", "dirname", "split", "splitext", "normpath", "isabs", "sep",
                             "commonprefix", "commonpath"})
OS_ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
OS_PROCESSES = re.compile(r"^(system|popen|fork\w*|kill\w*|abort|_exit|wait\w*|spawn\w*|exec\w*|posix_spawn\w*|"
                          r"startfile|setsid|set[re]*[ug]id|nice|plock)$")
# Dotted names judged wherever they are reached from (`from torch import load` included).
DOTTED: dict[str, str] = {
    **dict.fromkeys(("sys.modules", "sys.path", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
                     "torch.hub"), "dynamic_import"),
    **dict.fromkeys(("sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook",
                     "sys.excepthook"), "dynamic_attribute"),
    "sys.exit": "process_control",
    **dict.fromkeys(("torch.load", "torch.jit.load", "torch.package", "torch.ops.load_library",
                     "torch.classes.load_library", "torch.utils.cpp_extension", "numpy.load"), "dynamic_code"),
    **dict.fromkeys(("torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
                     "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "numpy.memmap", "numpy.fromregex"),
                    "file_access"),
}
# Names of modules by convention: they count as the module unless the parsed text binds them otherwise.
CONVENTIONAL = {**{root: root for root in {m.split(".")[0] for m in DENIED_MODULES} | OS_FAMILY},
                "sys": "sys", "torch": "torch", "numpy": "numpy", "np": "numpy"}
# Attributes refused on any object: an alias of a module bound outside the parsed text still meets them.
ATTRIBUTES: dict[str, str] = {
    **dict.fromkeys(OS_ENVIRONMENT, "environment_access"),
    **dict.fromkeys(("system", "popen", "Popen", "check_output", "check_call", "getoutput", "getstatusoutput", "fork",
                     "forkpty", "posix_spawn", "posix_spawnp", "kill", "killpg", "_exit", "create_subprocess_exec",
                     "create_subprocess_shell", "ProcessPoolExecutor", "spawnv", "spawnve", "spawnvp", "spawnl",
                     "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp"), "process_control"),
    **dict.fromkeys(("urlopen", "urlretrieve", "create_connection", "getaddrinfo", "open_connection",
                     "open_unix_connection", "start_server", "start_unix_server", "create_server", "socketpair",
                     "HTTPConnection", "HTTPSConnection"), "network_access"),
    **dict.fromkeys(("open", "read_text", "read_bytes", "write_text", "write_bytes", "unlink", "rmdir", "rmtree",
                     "touch", "symlink_to", "hardlink_to", "link_to", "mkdir", "makedirs", "iterdir", "rglob", "chmod",
                     "lchmod", "chown", "rename", "tofile", "fromfile", "copyfile", "copytree", "FileHandler"),
                    "file_access"),
    **dict.fromkeys(("import_module", "reload", "exec_module", "load_module", "find_spec", "spec_from_file_location",
                     "module_from_spec", "load_library", "resolve_obj_by_qualname", "import_from_path",
                     "load_plugins_by_group", "__import__"), "dynamic_import"),
    **dict.fromkeys(("__dict__", "__globals__", "__builtins__", "__subclasses__", "__bases__", "__base__", "__mro__",
                     "__getattribute__", "__code__", "__closure__", "__reduce__", "__reduce_ex__", "__loader__",
                     "__spec__", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "gi_frame", "gi_code",
                     "cr_frame", "ag_frame", "tb_frame", "tb_next", "_getframe", "_current_frames", "currentframe",
                     "get_objects", "get_referrers", "get_referents", "attrgetter", "methodcaller"),
                    "dynamic_attribute"),
}
# Bare names refused wherever they appear, called or not (`f = open` is as good as `open()`).
NAMES: dict[str, str] = {
    "open": "file_access",
    **dict.fromkeys(("exec", "eval", "compile", "breakpoint"), "dynamic_code"),
    **dict.fromkeys(("__import__", "import_module", "resolve_obj_by_qualname", "import_from_path",
                     "load_plugins_by_group"), "dynamic_import"),
    **dict.fromkeys(("globals", "locals", "vars", "getattr", "setattr", "delattr", "__builtins__", "__loader__",
                     "__spec__", "attrgetter", "methodcaller"), "dynamic_attribute"),
    **dict.fromkeys(("exit", "quit", "ProcessPoolExecutor"), "process_control"),
    **dict.fromkeys(OS_ENVIRONMENT, "environment_access"),
}
DYNAMIC_ATTRIBUTE_CALLS = frozenset({"getattr", "setattr", "delattr"})
SECURITY_WORDS = re.compile(r"\b(ssl|tls|auth\w*|password|passwd|secret|api_?key|token_urlsafe|hmac|verify|"
                            r"credentials?|private_key)\b", re.IGNORECASE)
ERROR_HANDLING = frozenset({"suppress"})


class Finding(NamedTuple):
    rule: str
    line: int  # in the parsed text, 1-based
    what: str


class _Lines:
    """Which lines of the parsed text changed; a node is judged when its span holds one."""

    def __init__(self, changed: set[int]):
        self.sorted = sorted(changed)

    def touches(self, node: ast.AST) -> bool:
        first = getattr(node, "lineno", None)
        return first is not None and self.between(first, getattr(node, "end_lineno", None) or first)

    def between(self, first: int, last: int) -> bool:
        at = bisect_left(self.sorted, first)
        return at < len(self.sorted) and self.sorted[at] <= last


def _imports(tree: ast.AST) -> dict[str, str]:
    """name -> the dotted module (or module attribute) an import in the text binds it to."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:  # `import a.b` binds a; `import a.b as c` binds c to a.b
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _other_bindings(tree: ast.AST) -> set[str]:
    """Names the text binds to something other than an import (a parameter, an assignment, a loop variable)."""
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    names |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    names |= {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                         ast.ClassDef))}
    return names


def _module_rule(dotted: list[str]) -> tuple[str, str] | None:
    """(rule, what) for a use of `dotted` (a module and attributes), or None."""
    name = ".".join(dotted)
    if dotted[0] in OS_FAMILY:
        if len(dotted) == 1:
            return "dynamic_attribute", f"the module {name} handed on as a value"
        attr = dotted[1]
        if attr == "path":
            if len(dotted) > 2 and dotted[2] not in OS_PATH_ALLOWED:
                return "file_access", name
            return None
        if attr in OS_ALLOWED:
            return None
        if attr in OS_ENVIRONMENT:
            return "environment_access", name
        return ("process_control" if OS_PROCESSES.match(attr) else "file_access"), name
    for size in range(len(dotted), 0, -1):
        prefix = ".".join(dotted[:size])
        if prefix in DOTTED:
            return DOTTED[prefix], name
        if prefix in DENIED_MODULES:
            return DENIED_MODULES[prefix], name
    return None


def _denied_import(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in OS_FAMILY or any(".".join(parts[:size]) in DENIED_MODULES for size in range(1, len(parts) + 1))


class _Judge(ast.NodeVisitor):
    def __init__(self, tree: ast.AST, lines: _Lines, imports: dict[str, str]):
        self.lines, self.found = lines, []
        self.imports, self.others = {**imports, **_imports(tree)}, _other_bindings(tree)
        self.skip: set[int] = set()  # ids of nodes already judged as part of a larger one

    def add(self, rule: str, node: ast.AST, what: str) -> None:
        self.found.append(Finding(rule, getattr(node, "lineno", 0), what))

    def module_of(self, name: str) -> list[str] | None:
        if name in self.imports:
            return self.imports[name].split(".")
        if name in CONVENTIONAL and name not in self.others:
            return CONVENTIONAL[name].split(".")
        return None

    def generic_visit(self, node: ast.AST) -> None:
        if self.lines.touches(node) and id(node) not in self.skip:
            self.judge(node)
        super().generic_visit(node)

    def judge(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.judge_import(node)
        elif isinstance(node, ast.Attribute):
            self.judge_chain(node)
        elif isinstance(node, ast.Name):
            self.judge_name(node)
        elif isinstance(node, ast.Call):
            self.judge_call(node)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            if self.lines.between(node.lineno, node.lineno) or any(self.lines.touches(s) for s in node.finalbody):
                self.add("sensitive_code", node, "error handling (try/finally)")
        elif isinstance(node, ast.ExceptHandler):
            self.add("sensitive_code", node, "error handling (except)")
        elif isinstance(node, ast.Raise):
            self.add("sensitive_code", node, "error handling (raise)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SECURITY_WORDS.search(node.value):
            self.add("sensitive_code", node, f"security ({SECURITY_WORDS.search(node.value).group(0)!r} in a string)")
        self.judge_identifiers(node)

    def judge_identifiers(self, node: ast.AST) -> None:
        names = [getattr(node, field, None) for field in ("name", "arg", "asname")]  # defs, parameters, keywords
        for name in filter(None, names):
            if isinstance(name, str) and SECURITY_WORDS.search(name):
                self.add("sensitive_code", node, f"security ({name})")

    def judge_import(self, node: ast.Import | ast.ImportFrom) -> None:
        base = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        for alias in node.names:
            if alias.name == "*":
                self.add("dynamic_import", node, f"from {base} import *: names the critic cannot see")
                continue
            dotted = f"{base}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.name
            if getattr(node, "level", 0) == 0 and _denied_import(dotted):
                self.add("denied_import", node, f"import {dotted}")
            elif getattr(node, "level", 0) == 0 and (found := _module_rule(dotted.split("."))) is not None:
                self.add(found[0], node, f"import {found[1]}")
            elif alias.name in ATTRIBUTES or alias.name in NAMES:
                self.add(ATTRIBUTES.get(alias.name) or NAMES[alias.name], node, f"import {alias.name}")
            for name in (alias.name, alias.asname):
                if name and SECURITY_WORDS.search(name):
                    self.add("sensitive_code", node, f"security ({name})")

    def judge_chain(self, node: ast.Attribute) -> None:
        parts, root = [], node
        while isinstance(root, ast.Attribute):
            parts.insert(0, root.attr)
            self.skip.add(id(root))
            root = root.value
        for attr in parts:
            if attr in ATTRIBUTES:
                self.add(ATTRIBUTES[attr], node, f".{attr}")
            elif attr in ERROR_HANDLING:
                self.add("sensitive_code", node, f"error handling (.{attr})")
            elif SECURITY_WORDS.search(attr):
                self.add("sensitive_code", node, f"security (.{attr})")
        if isinstance(root, ast.Name):
            self.skip.add(id(root))
            module = self.module_of(root.id)
            if root.id in NAMES:
                self.add(NAMES[root.id], root, root.id)
            if module is not None and (found := _module_rule(module + parts)) is not None:
                self.add(found[0], node, found[1])

    def judge_name(self, node: ast.Name) -> None:
        if node.id in NAMES:
            self.add(NAMES[node.id], node, node.id)
        elif node.id in ERROR_HANDLING:
            self.add("sensitive_code", node, f"error handling ({node.id})")
        elif SECURITY_WORDS.search(node.id):
            self.add("sensitive_code", node, f"security ({node.id})")
        module = self.module_of(node.id)
        if module is not None and isinstance(node.ctx, ast.Load):
            found = _module_rule(module) if len(module) > 1 or module[0] in OS_FAMILY else None
            if found is None and len(module) == 1 and _denied_import(module[0]):
                found = ("dynamic_attribute", f"the module {module[0]} handed on as a value")
            if found is not None:
                self.add(found[0], node, found[1])

    def judge_call(self, node: ast.Call) -> None:
        func = node.func
        if not (isinstance(func, ast.Name) and func.id in DYNAMIC_ATTRIBUTE_CALLS):
            return
        self.skip.add(id(func))
        args = node.args
        if len(args) < 2 or any(isinstance(a, ast.Starred) for a in args) or node.keywords:
            self.add("dynamic_attribute", node, f"{func.id} with arguments the critic cannot read")
            return
        target, name = args[0], args[1]
        root = target
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(target, ast.Call):
            self.add("dynamic_attribute", node, f"{func.id} on a call's result")
        elif isinstance(root, ast.Name) and self.module_of(root.id) is not None:
            self.add("dynamic_attribute", node, f"{func.id} on the module {'.'.join(self.module_of(root.id))}")
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            self.add("dynamic_attribute", node, f"{func.id} with a computed attribute name")
        elif name.value in ATTRIBUTES:
            self.add(ATTRIBUTES[name.value], node, f"{func.id}(..., {name.value!r})")


def imports_in(lines: list[str]) -> dict[str, str]:
    """The bindings of the import statements among `lines` that parse alone (a hunk's context)."""
    bound: dict[str, str] = {}
    for line in lines:
        if line.lstrip().startswith(("import ", "from ")):
            try:
                bound.update(_imports(ast.parse(line.strip())))
            except SyntaxError:
                continue
    return bound


def findings(tree: ast.AST, changed: set[int], imports: dict[str, str] | None = None) -> list[Finding]:
    """Every rule a node touching a changed line of `tree` breaks, in the order of the text; `imports`: bindings
    seen beside the parsed text (the imports among a hunk's lines)."""
    judge = _Judge(tree, _Lines(changed), imports or {})
    judge.visit(tree)
    return sorted(set(judge.found), key=lambda f: (f.line, f.rule, f.what))
