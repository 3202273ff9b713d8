"""The engine's own argv parser, its flag list and its package folder, read in the serving interpreter.

Standard library only: this file's text runs inside the serving interpreter
(`python -c <text> <json>`, which may lack this project) and is imported in-process too.
The request names the engine's parser (`module:attr` of a parser class and of the
function that fills it, from the engine's module), the args that make a parse complete
(the model flag), the argv lists to check, and the package whose folder and source
files a patch proposal is checked against and shown.
"""

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import sys
from pathlib import Path


def _attribute(path):
    module, _, name = path.partition(":")
    target = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def build_parser(parser_class, builder, builder_args):
    parser = _attribute(parser_class)()
    built = _attribute(builder)(parser, *builder_args)
    return built if isinstance(built, argparse.ArgumentParser) else parser


def check(parser, prefix, argv):
    """None when argv parses, else what the parser said."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args([*prefix, *argv])
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "rejected by the parser"
    except Exception as exc:  # a type= callable that raises its own error is still a rejection
        return f"{type(exc).__name__}: {exc}"
    return None


def flag_list(parser):
    flags = []
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or "--help" in longs:
            continue
        flags.append({"flags": longs, "choices": [str(c) for c in action.choices] if action.choices else None,
                      "default": repr(action.default)[:80], "takes_value": action.nargs != 0,
                      "help": (action.help or "")[:160] if action.help != argparse.SUPPRESS else ""})
    return flags


def package_sources(package, files, max_bytes):
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None, {}
    folder = Path(list(spec.submodule_search_locations)[0])
    sources, budget = {}, max_bytes
    for relative in files:
        path = folder / relative
        if budget <= 0 or not path.is_file():
            continue
        text = path.read_text(errors="replace")[:budget]
        sources[f"{package}/{relative}"] = text
        budget -= len(text)
    return str(folder.parent), sources


def probe(request):
    out = {"flags": [], "errors": [], "parser_error": None}
    try:
        parser = build_parser(request["parser_class"], request["builder"], request.get("builder_args", []))
        out["flags"] = flag_list(parser)
        out["errors"] = [check(parser, request.get("prefix", []), argv) for argv in request.get("argvs", [])]
    except Exception as exc:  # the parser itself cannot be built: every argv is unchecked, so refused
        out["parser_error"] = f"{type(exc).__name__}: {exc}"
    out["package_root"], out["sources"] = package_sources(request["package"], request.get("source_files", []),
                                                          request.get("max_source_bytes", 0))
    return out


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
