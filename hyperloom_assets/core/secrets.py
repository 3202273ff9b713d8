"""Secrets a run holds, and how they are kept out of everything the tool writes. Pure code.

A target may carry credentials (`HF_TOKEN` in `env`, `--hf-token` in `server_args`) and
the process running the tool holds others (the SDK keys, a database URL with its
password). The server gets the real values; prompts, stored model calls, metadata, the
result store, reports and the tool's own logs get `<redacted>` instead.

What is secret:
- A name (an env variable, a flag without its dashes, a URL query parameter) whose last
  word, split at anything not a letter or digit, ends in key(s), token, secret(s),
  password(s), passwd or credential(s), case-insensitively: `HF_TOKEN`, `VLLM_API_KEY`,
  `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`, `--ssl-keyfile-password`. The last word only, so
  `--kv-cache-dtype`, `--max-num-batched-tokens` (tokens, a count),
  `--return-tokens-as-token-ids`, `VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD`, `HF_TOKEN_PATH`
  and `--ssl-keyfile` (a path) are not; nor a rate or a latency whose last word follows
  "per" or "first" (SGLang's `--kt-max-deferred-experts-per-token`,
  `--bucket-time-to-first-token`).
- The engines' known secret flags (`KNOWN_SECRET_FLAGS`), which the rule names anyway.
- The values of those: an env value, the argument(s) after a secret flag (`--flag v`,
  `--flag v1 v2` for vLLM's `--api-key` that takes several, `--flag=v`), a password in
  a URL's userinfo or a secret query parameter (`?password=`, which libpq accepts).

Free text is cleaned three ways: each secret value known to the run (at least
`MIN_SEARCHED_LEN` characters: a shorter one would match ordinary text) is replaced
wherever it appears; `--secret-flag value` and `SECRET_NAME=value` shapes are masked
whatever their value; and URLs lose their passwords.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from hyperloom_assets.core.models import Frozen

REDACTED = "<redacted>"
# Each engine's flags that carry a credential: vLLM's --hf-token and --api-key, SGLang's
# --api-key, --admin-api-key and --ssl-keyfile-password; ATOM's server takes none.
KNOWN_SECRET_FLAGS = frozenset({"--hf-token", "--api-key", "--admin-api-key", "--ssl-keyfile-password"})
MIN_SEARCHED_LEN = 8
_ENDINGS = ("key", "keys", "token", "secret", "secrets", "password", "passwords", "passwd", "credential",
            "credentials")
_NOT_SECRET_AFTER = frozenset({"per", "first"})
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_VALUE = r"""("[^"]*"|'[^']*'|[^\s"',;&)\]}]+)"""
_FLAG_VALUE = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)(=|[ \t]+)" + _VALUE)
_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=" + _VALUE)
_URL_USERINFO = re.compile(r"(\b[a-zA-Z][\w+.-]*://[^\s:/@]*:)([^\s@/]+)(@)")
_QUERY_PARAM = re.compile(r"([?&;])([\w.-]+)=([^&#\s\"']*)")
_NOT_A_VALUE = frozenset({"", "none", "null", "true", "false"})


def is_secret_name(name: str) -> bool:
    """Does this env name, flag name (dashes or not) or parameter name hold a secret?"""
    words = [word for word in _WORD_SPLIT.split(name.lower()) if word]
    if not words or not words[-1].endswith(_ENDINGS):
        return False
    return not (len(words) > 1 and words[-2] in _NOT_SECRET_AFTER)


def is_secret_flag(token: str) -> bool:
    """A `--flag` (its `=value` ignored) whose argument is a secret."""
    name = token.partition("=")[0]
    return name.startswith("-") and (name in KNOWN_SECRET_FLAGS or is_secret_name(name))


def _argv_secrets(argv: Sequence[str]) -> list[tuple[int, str, str]]:
    """(index, flag, value) of each secret value in argv; an `=value` token gives its own index.

    The arguments after a secret flag are its values up to the next token that starts with
    `-`, as argparse reads them (a value starting with `-` must be given as `--flag=value`).
    """
    found, flag = [], None
    for index, token in enumerate(argv):
        if token.startswith("-"):
            name, eq, value = token.partition("=")
            secret = is_secret_flag(name)
            if secret and eq:
                found.append((index, name, value))
            flag = name if secret and not eq else None
        elif flag is not None:
            found.append((index, flag, token))
    return found


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv with each secret flag's value(s) replaced by REDACTED; the flags themselves stay."""
    out = list(argv)
    for index, flag, _ in _argv_secrets(argv):
        out[index] = f"{flag}={REDACTED}" if out[index].startswith("-") else REDACTED
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """env with each secret-named variable's value replaced by REDACTED (an empty value stays empty)."""
    return {name: REDACTED if value and is_secret_name(name) else value for name, value in env.items()}


def url_secrets(text: str) -> list[str]:
    """The passwords in the URLs of a text: userinfo passwords and secret query parameters."""
    found = [match.group(2) for match in _URL_USERINFO.finditer(text)]
    found += [match.group(3) for match in _QUERY_PARAM.finditer(text) if is_secret_name(match.group(2))]
    return [value for value in found if value]


def env_secrets(env: Mapping[str, str]) -> list[str]:
    """The secret values of an environment: secret-named variables, and the passwords of URLs in any."""
    found = [value for name, value in env.items() if value and is_secret_name(name)]
    return found + [secret for value in env.values() for secret in url_secrets(value)]


def argv_secrets(argv: Sequence[str]) -> list[str]:
    return [value for _, _, value in _argv_secrets(argv) if value]


def _mask_flag(match: re.Match) -> str:
    flag, sep, value = match.groups()
    if not is_secret_flag(flag) or value.startswith("-") or value.strip("'\"").lower() in _NOT_A_VALUE:
        return match.group(0)
    return f"{flag}{sep}{REDACTED}"


def _mask_assignment(match: re.Match) -> str:
    name, value = match.groups()
    if not is_secret_name(name) or value.strip("'\"").lower() in _NOT_A_VALUE:
        return match.group(0)
    return f"{name}={REDACTED}"


def _mask_query(match: re.Match) -> str:
    lead, name, value = match.groups()
    return f"{lead}{name}={REDACTED}" if value and is_secret_name(name) else match.group(0)


def mask_urls(text: str) -> str:
    """Text with every URL's password (userinfo and secret query parameters) replaced."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}{m.group(3)}", text)
    return _QUERY_PARAM.sub(_mask_query, text)


class Redactor(Frozen):
    """The secret values known to a run, and the redaction of text, env, argv and JSON with them."""

    values: tuple[str, ...] = ()  # longest first, so a value inside another is not left half shown

    @classmethod
    def of(cls, *, env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None,
           environ: Mapping[str, str] | None = None, values: Iterable[str] = ()) -> Redactor:
        """The secrets of a target's env and argv, of the process's environment, and any given."""
        found = set(values) | set(env_secrets(env or {})) | set(argv_secrets(argv or ()))
        found |= set(env_secrets(environ or {}))
        return cls(values=tuple(sorted((v for v in found if len(v) >= MIN_SEARCHED_LEN), key=lambda v: (-len(v), v))))

    @classmethod
    def within(cls, value: Any, environ: Mapping[str, str] | None = None) -> Redactor:
        """The secrets a JSON value names itself (env mappings with upper-case names, argv lists), and the environment's."""
        return cls.of(environ=environ, values=_named_secrets(value))

    def joined(self, other: Redactor) -> Redactor:
        return Redactor.of(values=self.values + other.values)

    def known(self, text: str) -> str:
        """Text with each known value replaced, and nothing else touched: for text kept word for
        word (a prompt, a reply, whose engine sources may say `api_key=args.api_key`)."""
        for value in self.values:
            text = text.replace(value, REDACTED)
        return text

    def text(self, text: str) -> str:
        """Text of the tool's own (an error, a reason, a log line): the known values, and the
        `--secret-flag value`, `SECRET_NAME=value` and URL password shapes whatever their value."""
        text = _FLAG_VALUE.sub(_mask_flag, self.known(text))
        text = _ASSIGNMENT.sub(_mask_assignment, text)
        return mask_urls(text)

    def maybe_text(self, text: str | None) -> str | None:
        return None if text is None else self.text(text)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {name: self.text(value) for name, value in redact_env(env).items()}

    def argv(self, argv: Sequence[str]) -> list[str]:
        return [self.text(token) for token in redact_argv(argv)]

    def value(self, value: Any, exact: bool = False) -> Any:
        """A JSON value with its secrets replaced: in strings, in lists of strings read as argv, in
        mappings whose keys are upper-case env names, and in `{name, value}` env settings.
        `exact`: strings lose only the known values (`known`), as a record kept word for word."""
        if isinstance(value, str):
            return self.known(value) if exact else self.text(value)
        if isinstance(value, (list, tuple)):
            if value and all(isinstance(item, str) for item in value):
                return [self.known(token) if exact else self.text(token) for token in redact_argv(value)]
            return [self.value(item, exact) for item in value]
        if isinstance(value, Mapping):
            if _is_env_setting(value):
                return {**value, "value": REDACTED if value["value"] else ""}
            return {key: REDACTED if _is_env_secret(key, item) else self.value(item, exact) for key, item in value.items()}
        return value


def _is_env_name(key: object) -> bool:
    return isinstance(key, str) and bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", key))


def _is_env_secret(key: object, item: object) -> bool:
    """An upper-case key is an env name: a secret one's non-empty text is its value. The project's
    own JSON fields are lower-case (`context_key` is no secret)."""
    return _is_env_name(key) and isinstance(item, str) and bool(item) and is_secret_name(key)


def _is_env_setting(mapping: Mapping) -> bool:
    """A proposal's env entry, `{"name": "HF_TOKEN", "value": "..."}`."""
    name, value = mapping.get("name"), mapping.get("value")
    return set(mapping) == {"name", "value"} and isinstance(name, str) and isinstance(value, str) and is_secret_name(name)


def _named_secrets(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, str) for item in value):
            return argv_secrets(value)
        return [found for item in value for found in _named_secrets(item)]
    if isinstance(value, Mapping):
        if _is_env_setting(value):
            return [value["value"]]
        own = [item for key, item in value.items() if _is_env_secret(key, item)]
        return own + [found for item in value.values() for found in _named_secrets(item)]
    if isinstance(value, str):
        return url_secrets(value)
    return []


def variable_for(name: str) -> str:
    """The shell variable a redacted value is read from: an env name itself, a flag's name in
    upper case (`--hf-token` -> HF_TOKEN)."""
    variable = re.sub(r"[^A-Za-z0-9_]", "_", name.lstrip("-"))
    variable = variable.upper() if name.startswith("-") else variable
    return variable if re.match(r"[A-Za-z_]", variable) else f"_{variable}"


def shell_command(env: Mapping[str, str], argv: Sequence[str]) -> tuple[str, list[str]]:
    """(a command a person can paste, the shell variables it reads): each REDACTED value is a
    double-quoted reference to a variable of the pasting shell, so the secret is never written."""
    parts, variables, flag = [], [], None

    def ref(name: str) -> str:
        variables.append(variable_for(name))
        return f'"${variables[-1]}"'

    for name, value in sorted(env.items()):
        parts.append(f"{name}={ref(name) if value == REDACTED else shlex.quote(value)}")
    for token in argv:
        if token.startswith("-"):
            flag, eq, value = token.partition("=")
            secret = eq and value == REDACTED and is_secret_flag(flag)
            parts.append(f"{flag}={ref(flag)}" if secret else shlex.quote(token))
            flag = None if eq else flag
        else:
            secret = token == REDACTED and flag is not None and is_secret_flag(flag)
            parts.append(ref(flag) if secret else shlex.quote(token))
    return " ".join(parts), list(dict.fromkeys(variables))


def restore_env(snapshot: Mapping[str, str], live: Mapping[str, str], field: str = "env") -> dict[str, str]:
    """A snapshot's env with each REDACTED value read from the live one; KeyError naming the field."""
    restored = {}
    for name, value in snapshot.items():
        if value == REDACTED:
            if name not in live or live[name] == REDACTED:
                raise KeyError(f"{field}.{name}: its secret value is no longer in the file")
            value = live[name]
        restored[name] = value
    return restored


def restore_argv(snapshot: Sequence[str], live: Sequence[str], field: str = "server_args") -> list[str]:
    """A snapshot's argv with each redacted secret read from the live argv, flag by flag in order."""
    values: dict[str, list[str]] = {}
    for _, flag, value in _argv_secrets(live):
        values.setdefault(flag, []).append(value)
    restored = list(snapshot)
    for index, flag, value in _argv_secrets(snapshot):
        if value != REDACTED:
            continue
        if not values.get(flag):
            raise KeyError(f"{field}: the secret value of {flag} is no longer in the file")
        real = values[flag].pop(0)
        restored[index] = f"{flag}={real}" if restored[index].startswith("-") else real
    return restored


def has_redacted(env: Mapping[str, str], argv: Sequence[str]) -> bool:
    return REDACTED in env.values() or any(value == REDACTED for _, _, value in _argv_secrets(argv))



def snapshot_text(text: str) -> str:
    """A target file's text as a run's snapshot keeps it in the store: its secret env values and
    secret flags' values REDACTED (then written as YAML again), else the text as it is."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # loading the target reports it, naming the file
    if not isinstance(raw, dict):
        return text
    env, argv = raw.get("env"), raw.get("server_args")
    env = redact_env(env) if isinstance(env, dict) and all(isinstance(v, str) for v in env.values()) else env
    argv = redact_argv(argv) if isinstance(argv, list) and all(isinstance(t, str) for t in argv) else argv
    if env == raw.get("env") and argv == raw.get("server_args"):
        return text
    return yaml.safe_dump({**raw, **({"env": env} if "env" in raw else {}),
                           **({"server_args": argv} if "server_args" in raw else {})}, sort_keys=False)
