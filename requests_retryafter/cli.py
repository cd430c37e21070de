"""The ``requests-retryafter`` command (also ``python -m requests_retryafter``).

Subcommands:

- ``demo``: crawl local lying portals on virtual time and show what the adapter learned.
- ``report``: what a store knows about each host (table, ``--json``, ``--html FILE``).
- ``run``: run an unmodified script (or ``-m module``) with the adapter on every session.
- ``get``: one request through the adapter, printing each decision as it happens.
- ``forget``: drop what a store knows of a host.
- ``unhold``: clear a host's hold and shared wait in a store.

``run`` and ``get`` end with a summary per host on stderr: requests, refusals, waits (how many
and how long), holds and give-ups.

Errors go to stderr with a one-line message and a non-zero exit status: 2 for a usage or
configuration error, 1 for a failure (an unreachable host, a held host, a budget used up).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import runpy
import sys
import time
import traceback
from types import TracebackType
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import requests

from . import __version__
from .adapter import HostSummary, RetryAfterAdapter
from .categories import judge
from .decisions import Decision, Event
from .errors import ConfigurationError, HostHeld, RetryAfterError, StoreError
from .policy import ENV_PREFIX
from .report import (
    format_epoch,
    printable,
    render_html,
    render_json,
    render_table,
    table_rows,
)
from .state import HostState, host_key
from .stores import StateStore, open_store

__all__ = ["format_decision", "main"]

log = logging.getLogger(__name__)

PROG = "requests-retryafter"
STORE_ENV = ENV_PREFIX + "STORE"

#: Exit statuses.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as one line on stderr, with an exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


# -- shared helpers ---------------------------------------------------------------------------


def _store_spec(given: Optional[str], *, required: bool) -> Optional[str]:
    spec = given or os.environ.get(STORE_ENV) or None
    if spec is None and required:
        raise CliError(f"no store given: pass --store SPEC or set {STORE_ENV}", EXIT_USAGE)
    return spec


@contextlib.contextmanager
def _opened_store(spec: Optional[str], *, read_only: bool = False) -> Iterator[StateStore]:
    """Open a store from a spec, turning every way it can fail into a :class:`CliError`.

    With ``read_only``, the store is opened to be read only: nothing is created, locked,
    moved or written (``report``).
    """
    try:
        store = open_store(spec, read_only=True) if read_only else open_store(spec)
    except ConfigurationError as exc:
        raise CliError(f"bad store spec: {exc}", EXIT_USAGE) from None
    except ImportError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except (StoreError, OSError) as exc:
        raise CliError(f"cannot open the store: {_os_message(exc)}") from None
    try:
        yield store
    finally:
        with contextlib.suppress(StoreError, OSError):
            store.close()


def _os_message(exc: BaseException) -> str:
    """An exception's text; for a bare ``OSError``, its reason and the file it names."""
    if isinstance(exc, OSError) and not isinstance(exc, StoreError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def _store_items(store: StateStore) -> List[Tuple[str, HostState]]:
    try:
        return list(store.items())
    except (StoreError, OSError, ValueError) as exc:
        raise CliError(f"cannot read the store: {_os_message(exc)}") from None


def _use_rich(stream: IO[str]) -> bool:
    """Whether to draw with rich: installed, and writing to a terminal."""
    if not stream.isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def format_decision(decision: Decision) -> str:
    """One line for a decision, as ``get`` and ``run -v`` print them.

    >>> format_decision(Decision("sleep", "api.example.org", 30.0, "Retry-After 30 obeyed",
    ...                          status=429, attempt=1))
    '* api.example.org: 429 on attempt 1; sleeping 30.0 s: Retry-After 30 obeyed'
    """
    d = decision
    if d.event == Event.SLEEP:
        what = f"{d.status} on attempt {d.attempt}" if d.status else f"attempt {d.attempt} failed"
        return f"* {d.host}: {what}; sleeping {d.wait:.1f} s: {d.reason}"
    if d.event == Event.WAIT:
        return f"* {d.host}: waiting {d.wait:.1f} s before attempt {d.attempt + 1}: {d.reason}"
    if d.event == Event.HOLD:
        return f"* {d.host}: held until {format_epoch(d.until)}: {d.reason}"
    if d.event == Event.CATEGORY:
        return f"* {d.host}: {d.reason}"
    return f"* {d.host}: {d.event.value.replace('_', ' ')}: {d.reason}"


def format_summary(summary: HostSummary) -> str:
    """One line of the per-host summary ``run`` and ``get`` end with.

    >>> format_summary(HostSummary("api.example.org", calls=3, requests=4, refusals=1,
    ...                            waits=1, waited=5.0))
    'api.example.org: 4 requests, 1 refusal, 1 wait (5.0 s), 0 holds, 0 give-ups'
    """
    s = summary
    return (
        f"{s.host}: {_plural(s.requests, 'request')}, {_plural(s.refusals, 'refusal')}, "
        f"{_plural(s.waits, 'wait')} ({s.waited:.1f} s), {_plural(s.holds, 'hold')}, "
        f"{_plural(s.give_ups, 'give-up')}"
    )


def _print_summary(summaries: Dict[str, HostSummary], stream: IO[str]) -> None:
    """The per-host summary, one line per host (nothing when no host was called)."""
    if not summaries:
        return
    print(f"{PROG}: summary per host:", file=stream)
    for key in sorted(summaries):
        print(printable(redact_text(f"  {format_summary(summaries[key])}")), file=stream)
    stream.flush()


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _decision_printer(stream: IO[str]) -> Callable[[Decision], None]:
    """An ``on_decision`` hook that prints each decision to ``stream`` as it happens."""

    def show(decision: Decision) -> None:
        print(printable(redact_text(format_decision(decision))), file=stream, flush=True)

    return show


def _exit_code(code: object) -> int:
    """The exit status ``sys.exit(code)`` would give (printing a message as Python does)."""
    if code is None:
        return EXIT_OK
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_FAILURE


# -- report -----------------------------------------------------------------------------------


def _cmd_report(args: argparse.Namespace) -> int:
    spec = _store_spec(args.store, required=True)
    assert spec is not None
    _refuse_missing_file(spec)
    if args.html:
        _refuse_store_as_output(spec, args.html)
    now = time.time()
    with _opened_store(spec, read_only=True) as store:
        items = _store_items(store)
    if args.html:
        page = render_html(items, now=now)
        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(page)
        except OSError as exc:
            raise CliError(f"cannot write {args.html}: {exc.strerror or exc}") from None
        print(f"wrote {args.html} ({_plural(len(items), 'host')})", file=sys.stderr)
    if args.json:
        sys.stdout.write(render_json(items, now=now))
    elif not args.html:
        _print_table(items, now=now)
    return EXIT_OK


#: Schemes whose spec names a file (``scheme://PATH``).
_FILE_SCHEMES = ("json", "sqlite", "shelve")


def _refuse_missing_file(spec: str) -> None:
    """Refuse, before anything is opened, a file store whose path does not exist: ``report``
    only reads, so a mistyped path must be an error, not a new empty store (and no lock file
    may be left beside it). A shelve may be kept in files with a suffix the ``dbm`` module
    adds (``PATH.db``, ``PATH.dat``), so any file that starts with the path will do for it."""
    scheme, sep, rest = spec.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _FILE_SCHEMES:
        return
    if not rest or rest.endswith(("/", "\\")):
        return  # the store names its own error
    path = _store_file(spec)
    if path is None or os.path.lexists(path):
        return
    if scheme == "shelve":
        folder, name = os.path.split(path)
        with contextlib.suppress(OSError):
            if any(entry.startswith(name + ".") for entry in os.listdir(folder or ".")):
                return
    raise CliError(f"no store at {path}: the file does not exist (nothing was created)")


def _store_file(spec: str) -> Optional[str]:
    """The absolute path of a file store's spec, or ``None`` for another kind of store."""
    scheme, sep, rest = spec.partition("://")
    if not sep or scheme.lower() not in _FILE_SCHEMES or not rest:
        return None
    return os.path.abspath(os.path.expanduser(rest))


def _refuse_store_as_output(spec: str, output: str) -> None:
    """Refuse to write a report over the store it reports on (or one of its files)."""
    path = _store_file(spec)
    if path is None:
        return
    target = os.path.realpath(output)
    store = os.path.realpath(path)
    if target == store or (target.startswith(store) and target[len(store)] in ".-"):
        raise CliError(f"refusing to write the report over the store itself: {output}", EXIT_USAGE)


def _print_table(items: List[Tuple[str, HostState]], *, now: float) -> None:
    if items and _use_rich(sys.stdout):
        from rich.console import Console
        from rich.table import Table

        from .report import COLUMNS

        table = Table(*COLUMNS)
        for row in table_rows(items, now=now):
            table.add_row(*row)
        Console().print(table)
        return
    sys.stdout.write(render_table(items, now=now))


# -- forget and unhold ---------------------------------------------------------------------


def _host_arg(text: str) -> str:
    """The host key a ``HOST`` argument names: a URL's :func:`host_key`, else the text as
    given, lowercased (``api.example.org``, ``127.0.0.1:8080``)."""
    text = text.strip()
    if "://" in text:
        try:
            return host_key(text)
        except ValueError:
            raise CliError(f"not a URL or host: {redact_text(text)!r}", EXIT_USAGE) from None
    if not text or "/" in text or "@" in text:
        raise CliError(f"not a host: {redact_text(text)!r} (give HOST or HOST:PORT)", EXIT_USAGE)
    return text.lower()


def _known_host(store: StateStore, key: str) -> HostState:
    """The state a store keeps of ``key``, or a :class:`CliError` saying it has none."""
    try:
        state = store.get(key)
    except (StoreError, OSError, ValueError) as exc:
        raise CliError(f"cannot read the store: {_os_message(exc)}") from None
    if state is None:
        hosts = sorted(h for h, _ in _store_items(store))
        close = [h for h in hosts if key in h or h in key][:3]
        hint = f" ({_plural(len(hosts), 'host')} in it)"
        if close:
            hint = f"; did you mean {', '.join(close)}?"
        raise CliError(f"{key}: not in the store{hint}")
    return state


def _cmd_forget(args: argparse.Namespace) -> int:
    spec = _store_spec(args.store, required=True)
    assert spec is not None
    _refuse_missing_file(spec)
    key = _host_arg(args.host)
    with _opened_store(spec) as store:
        _known_host(store, key)
        try:
            store.delete(key)
        except (StoreError, OSError) as exc:
            raise CliError(f"cannot write the store: {_os_message(exc)}") from None
    print(f"{key}: forgotten (category, evidence, learned limit, hold and waits)")
    return EXIT_OK


def _cmd_unhold(args: argparse.Namespace) -> int:
    spec = _store_spec(args.store, required=True)
    assert spec is not None
    _refuse_missing_file(spec)
    key = _host_arg(args.host)
    now = time.time()
    with _opened_store(spec) as store:
        state = _known_host(store, key)
        held = state.held_until > now
        waiting = state.blocked_until > now
        if not held and not waiting:
            print(f"{key}: not held, and no shared wait; nothing to clear")
            return EXIT_OK

        def cleared(current: Optional[HostState]) -> HostState:
            base = current if current is not None else state
            return base.replace(
                held_until=0.0,
                held_since=0.0,
                hold_reason="",
                blocked_until=0.0,
                blocked_since=0.0,
                updated_at=max(base.updated_at, now),
            )

        try:
            store.update(key, cleared)
        except (StoreError, OSError) as exc:
            raise CliError(f"cannot write the store: {_os_message(exc)}") from None
    if held:
        print(f"{key}: hold until {format_epoch(state.held_until)} cleared ({state.hold_reason})")
    if waiting:
        print(f"{key}: shared wait until {format_epoch(state.blocked_until)} cleared")
    return EXIT_OK


# -- redaction --------------------------------------------------------------------------------
#
# Nothing the CLI prints may carry a secret: not a URL's userinfo, query values or fragment, not
# the value of a header that looks like a credential, not an exception's text that embeds them.
# The rules are by shape, not by a list of known names, and every message goes through
# redact_text() on its way out (errors in main(), decisions, -v lines, library warnings).

#: What replaces a secret.
REDACTED = "***"

#: Substrings of a header name (lowercased, without ``-`` and ``_``) that mark its value as a
#: credential: ``X-Api-Key``, ``X-Auth-Token``, ``X-Amz-Security-Token``, ``Proxy-Authorization``,
#: ``Set-Cookie``, ``X-CSRFToken``, ``X-Hub-Signature-256``, ``Private-Token``, ``DPoP``...
_SECRET_NAME_PARTS = (
    "auth",
    "token",
    "key",
    "secret",
    "pass",
    "pwd",
    "session",
    "cookie",
    "sign",
    "credential",
    "csrf",
    "xsrf",
    "jwt",
    "bearer",
    "ticket",
    "dpop",
    "private",
    "saml",
    "otp",
    "nonce",
)

#: A header value that is a credential whatever the header is called: an HTTP authentication
#: scheme followed by its credentials, or a JSON Web Token.
_SECRET_VALUE = re.compile(
    r"^\s*(?:(?:basic|bearer|digest|token|negotiate|ntlm|hoba|mutual|apikey|api-key|"
    r"aws4-hmac-sha256|dpop|gnap|privatetoken)\s+\S|.*\beyJ[\w-]{4,}\.[\w-]{4,})",
    re.IGNORECASE,
)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
#: A query parameter name worth keeping (an identifier, not a token someone put there).
_PARAM_NAME = re.compile(r"[A-Za-z_][\w.\-\[\]]{0,40}")
#: A run of text that may be (part of) a URL: up to whitespace, a quote or an angle bracket.
_TOKEN = re.compile(r"[^\s'\"<>`]+")


def _redact_query(query: str) -> str:
    parts = []
    for item in re.split(r"([&;])", query):
        if item in ("&", ";") or not item:
            parts.append(item)
            continue
        name, eq, _ = item.partition("=")
        parts.append(f"{name}={REDACTED}" if eq and _PARAM_NAME.fullmatch(name) else REDACTED)
    return "".join(parts)


def redact_url(url: str) -> str:
    """Return ``url`` with every secret part replaced by ``***``: userinfo (``***@host``), each
    query value (names are kept: ``?token=***&page=***``), the fragment, and the values of
    path parameters (``;jsessionid=***``). Scheme, host, port and path are kept.

    Works on anything, valid URL or not (a URL without a scheme, ``user:pass@host/x``, keeps
    only ``***@host/x``); it never raises.

    >>> redact_url("https://user:pw@api.example.org:8443/v1/items?token=abc&page=2#top")
    'https://***@api.example.org:8443/v1/items?token=***&page=***#***'
    >>> redact_url("user:pass@host.example/x")
    '***@host.example/x'
    """
    match = _SCHEME.match(url)
    prefix = match.group(0) if match else ""
    rest = url[len(prefix) :]
    rest, hashmark, fragment = rest.partition("#")
    rest, qmark, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = REDACTED + "@" + authority.rpartition("@")[2]
    elif "@" in path and ":" in authority and not re.search(r":\d*$", authority):
        # A password with a "/" in it ("http://u:p/ss@host/x"): the userinfo runs to the "@".
        authority, slash, path = REDACTED + "@" + path.rpartition("@")[2], "", ""
        authority, slash, path = authority.partition("/")
    path = re.sub(r";([^/;=]*)=[^/;]*", lambda m: f";{m.group(1)}={REDACTED}", path)
    text = prefix + authority + slash + path
    if qmark:
        text += "?" + _redact_query(query)
    if hashmark:
        text += "#" + (REDACTED if fragment else "")
    return text


def redact_header(name: str, value: str) -> str:
    """Return a header's value as it may be shown: ``***`` when the header looks like a
    credential (by its name, case-insensitively: anything with auth, token, key, secret,
    password, session, cookie, signature, credential, csrf/xsrf... in it), or when the value
    does (an authentication scheme and its credentials, a JSON Web Token); otherwise the value
    with any URL in it redacted (a ``Location`` with a token in its query).

    >>> redact_header("X-Amz-Security-Token", "FwoGZXIvYXdzE")
    '***'
    >>> redact_header("Accept", "*/*")
    '*/*'
    """
    if _secret_name(name) or _SECRET_VALUE.match(value):
        return REDACTED
    return redact_text(value)


def _looks_like_url(token: str) -> bool:
    return "://" in token or "@" in token or re.search(r"[?#].|;[^/;=]*=", token) is not None


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """Return ``text`` (a message, an exception's text) with every URL-looking part passed
    through :func:`redact_url` (anything with ``://``, an ``@``, a query or a fragment), then
    every occurrence of one of ``secrets`` (values known to be secret, such as the password
    given in the URL) replaced by ``***``.

    >>> redact_text("Max retries exceeded with url: /x?token=s3 (Caused by ...)")
    'Max retries exceeded with url: /x?token=*** (Caused by ...)'
    """

    def scrub(match: re.Match[str]) -> str:
        token = match.group(0)
        return redact_url(token) if _looks_like_url(token) else token

    result = _TOKEN.sub(scrub, text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 3:
            result = result.replace(secret, REDACTED)
    return result


def _secret_name(name: str) -> bool:
    folded = re.sub(r"[-_\s]", "", name.lower())
    return any(part in folded for part in _SECRET_NAME_PARTS)


def _known_secrets(url: str, headers: Dict[str, str]) -> List[str]:
    """The secrets the user handed the CLI, to scrub from anything printed even where the
    rules by shape would miss them (an exception's text that cut a URL at a space): the URL's
    userinfo and its parts; query and fragment values named like credentials or long enough to
    be one; the values of credential headers and their parts. Plain and percent-decoded."""
    from urllib.parse import unquote_plus

    found: List[str] = []
    rest = _SCHEME.sub("", url, count=1)
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    head = rest.partition("/")[0]
    if "@" in rest:
        userinfo = head.rpartition("@")[0] if "@" in head else rest.rpartition("@")[0]
        found += [userinfo, *userinfo.split(":", 1)]
    for item in re.split(r"[&;]", query) + re.split(r"[&;]", fragment):
        name, eq, value = item.partition("=")
        if not eq:
            value, name = name, ""
        if _secret_name(name) or len(value) >= 8:
            found.append(value)
    for name, value in headers.items():
        if redact_header(name, value) == REDACTED:
            words = value.split()
            found += [value, *words[1:]]  # the credentials after a scheme word
    found += [unquote_plus(f) for f in found]
    found += [repr(f)[1:-1] for f in found]  # as an exception's message quotes it
    return [f for f in found if len(f) >= 4]


def _display_host(url: str) -> str:
    """The host a URL names, for messages: its host key (of the URL with its userinfo
    redacted, so that a password cut short by a ``/`` never passes for a host), or ``?``."""
    redacted = redact_url(url)
    if not _SCHEME.match(redacted):
        redacted = "//" + redacted
    try:
        key = host_key(redacted)
    except ValueError:
        key = ""
    return key or "?"


# -- get --------------------------------------------------------------------------------------


def _path_only(url: str) -> str:
    """The path of ``url`` with its secret parts redacted (see :func:`redact_url`), without
    scheme and authority."""
    text = redact_url(url)
    match = _SCHEME.match(text)
    if match or not text.startswith("/"):
        rest = text[match.end() :] if match else text
        cut = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
        text = rest[min(cut) :] if cut else ""
    if not text.startswith("/"):
        text = "/" + text
    return text


def _reason(exc: BaseException) -> str:
    """A short cause for a connection failure, without the URL."""
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if match:
        return match.group(0).strip()
    for word in ("timed out", "Connection refused", "Name or service not known"):
        if word in text:
            return word
    return type(exc).__name__


def _cmd_get(args: argparse.Namespace) -> int:
    url: str = args.url
    headers: Dict[str, str] = {}
    for item in args.header or []:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            words = item.split(None, 1)  # the name, perhaps; never what follows it
            shown = (words[0] + (f" {REDACTED}" if len(words) > 1 else "")) if words else ""
            raise CliError(f"bad header {redact_text(shown)!r}: expected 'Name: value'", EXIT_USAGE)
        headers[name.strip()] = value.strip()
    secrets = _known_secrets(url, headers)
    host = _display_host(url)
    _decisions_shown()
    err = sys.stderr

    def say(text: str) -> None:
        print(printable(redact_text(text, secrets)), file=err, flush=True)

    def fail(message: str, code: int = EXIT_FAILURE) -> CliError:
        return CliError(redact_text(message, secrets), code)

    def show(decision: Decision) -> None:
        say(format_decision(decision))

    spec = _store_spec(args.store, required=False)
    with _opened_store(spec) as store:
        try:
            adapter = RetryAfterAdapter(store=store, on_decision=show)
        except ConfigurationError as exc:
            raise fail(str(exc), EXIT_USAGE) from None
        with requests.Session() as session:
            session.mount("https://", adapter)
            session.mount("http://", adapter)
            try:
                request = session.prepare_request(requests.Request("GET", url, headers=headers))
            except (
                requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema,
                requests.exceptions.InvalidURL,
                requests.exceptions.InvalidHeader,
            ) as exc:
                raise fail(f"invalid {_what(exc)}: {exc}", EXIT_USAGE) from None
            if args.verbose:
                say(f"> GET {_path_only(request.url or url)}")
                say(f"> Host: {host}")
                for name, value in request.headers.items():
                    say(f"> {name}: {redact_header(name, value)}")
                say(">")
            sent = False
            try:
                response = session.send(request, timeout=args.timeout, allow_redirects=True)
                sent = True
            except HostHeld as exc:
                raise fail(
                    f"{exc.host} is held until {format_epoch(exc.until)}: {exc.reason}"
                ) from None
            except RetryAfterError as exc:
                raise fail(f"gave up: {exc}") from None
            except (
                requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema,
                requests.exceptions.InvalidURL,
                requests.exceptions.InvalidHeader,
            ) as exc:
                raise fail(f"invalid {_what(exc)}: {exc}", EXIT_USAGE) from None
            except requests.exceptions.Timeout as exc:
                raise fail(f"{host}: timed out ({_reason(exc)})") from None
            except requests.exceptions.ConnectionError as exc:
                raise fail(f"cannot reach {host}: {_reason(exc)}") from None
            except requests.exceptions.RequestException as exc:
                raise fail(f"{host}: {type(exc).__name__}: {_reason(exc)}") from None
            finally:
                adapter.close()
                if not sent:  # before the error's line
                    _print_summary(adapter.summary(), err)
            if args.verbose:
                say(f"< HTTP {response.status_code} {response.reason}")
                for name, value in response.headers.items():
                    say(f"< {name}: {redact_header(name, value)}")
                say("<")
            _print_summary(adapter.summary(), err)
            if spec is not None:
                answered = [r.url for r in (*response.history, response) if r.url]
                problem = _record_seen(store, answered, adapter.clock.time())
                if problem:
                    say(f"{PROG}: {problem}")
            print(printable(f"{response.status_code} {response.reason}"))
            _print_preview(response, args.preview)
            return EXIT_OK if response.status_code < 400 else EXIT_FAILURE


def _record_seen(store: StateStore, urls: Sequence[str], now: float) -> str:
    """Give each host that answered one of ``urls`` an entry in ``store`` if it has none yet
    (the adapter writes a host only once there is something to learn, which a host that never
    refused does not give): a store named on the command line then exists after the run, and
    ``report`` lists the host as seen, with no rejection observed. An entry already there is
    left as it is. Returns ``""``, or what went wrong writing (the response still stands)."""
    for key in dict.fromkeys(host_key(url) for url in urls):

        def seen(current: Optional[HostState], key: str = key) -> HostState:
            if current is not None:
                return current
            verdict = judge(())  # unknown: "no rejection observed yet", as the engine says
            return HostState(key, evidence=verdict.evidence, updated_at=now)

        try:
            if store.get(key) is None:
                store.update(key, seen)
        except (StoreError, OSError, ValueError) as exc:
            return f"cannot write the store: {_os_message(exc)}"
    return ""


def _what(exc: BaseException) -> str:
    """What a request's ``Invalid*`` exception is about, for its message."""
    return "header" if isinstance(exc, requests.exceptions.InvalidHeader) else "URL"


def _print_preview(response: requests.Response, limit: int) -> None:
    body = response.content
    if not body or limit <= 0:
        return
    ctype = response.headers.get("Content-Type", "")
    textual = not ctype or ctype.startswith("text/") or "json" in ctype or "xml" in ctype
    if not textual:
        print(f"[{len(body)} bytes of {ctype.split(';')[0]}]")
        return
    text = body.decode(response.encoding or "utf-8", errors="replace")
    # Lines and tabs as sent; any other control character (an escape sequence from a hostile
    # server) shown as an escape rather than sent to the terminal.
    text = "\n".join(printable(line).replace("\\t", "\t") for line in text.split("\n"))
    if len(text) > limit:
        print(text[:limit] + f"… ({len(text) - limit} more characters)")
    else:
        print(text.rstrip("\n"))


# -- run --------------------------------------------------------------------------------------


def _frames(exc: BaseException) -> List[TracebackType]:
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    return frames


def _ours(tb: TracebackType) -> bool:
    return tb.tb_frame.f_globals.get("__name__") in ("runpy", __name__)


def _script_traceback(exc: BaseException) -> None:
    """Print ``exc``'s traceback as Python would for the script, without our own frames, and
    with any URL in it redacted (a requests exception's text names the URL it failed on, query
    string and all)."""
    frames = _frames(exc)
    while frames and _ours(frames[0]):
        frames.pop(0)
    lines = traceback.format_exception(type(exc), exc, frames[0] if frames else None)
    sys.stderr.write("".join(redact_text(line) for line in lines))


def _cmd_run(args: argparse.Namespace) -> int:
    from ._install import install, uninstall

    module: Optional[str] = args.module
    rest: List[str] = list(args.argv)
    if module is None:
        if not rest:
            raise CliError("run: give a script (or -m MODULE) to run", EXIT_USAGE)
        target, rest = rest[0], rest[1:]
        if not os.path.isfile(target):
            raise CliError(f"run: cannot open file {target!r}: no such file", EXIT_USAGE)
    else:
        target = module
    show = _decision_printer(sys.stderr)
    if args.verbose:
        _decisions_shown()

    spec = _store_spec(args.store, required=False)
    with _opened_store(spec) as store:
        try:
            adapter = install(store=store, on_decision=show if args.verbose else None)
        except ConfigurationError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        saved_argv, saved_path = sys.argv[:], sys.path[:]
        try:
            if module is not None:
                sys.argv = [module, *rest]
                if os.getcwd() not in sys.path:
                    sys.path.insert(0, os.getcwd())
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [target, *rest]
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                runpy.run_path(target, run_name="__main__")
        except SystemExit as exc:
            return _exit_code(exc.code)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except ImportError as exc:
            frames = _frames(exc)
            if module is not None and frames and _ours(frames[-1]):
                # runpy's own "No module named ...": the module was not found.
                raise CliError(f"run: {exc}", EXIT_USAGE) from None
            _script_traceback(exc)
            return EXIT_FAILURE
        except Exception as exc:
            _script_traceback(exc)
            return EXIT_FAILURE
        finally:
            sys.argv[:] = saved_argv
            sys.path[:] = saved_path
            uninstall()
            _print_summary(adapter.summary(), sys.stderr)
    return EXIT_OK


# -- demo -------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


# -- the parser -------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise instead of exiting (``main`` returns the code)."""

    def exit(self, status: int = 0, message: Optional[str] = None) -> Any:  # type: ignore[override]
        if message:
            self._print_message(message, sys.stderr)
        raise _ParserExit(status)


class _ParserExit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser (exposed for the docs and tests)."""
    parser = _Parser(
        prog=PROG,
        description="A requests adapter that honours Retry-After only as far as a host has "
        "earned it. Try: requests-retryafter demo",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    store_help = f"store spec, e.g. json:///path/hosts.json (default: ${STORE_ENV})"
    from .demo import DEMO_PORT_BASE

    demo = sub.add_parser(
        "demo",
        help="crawl local lying portals and show what was learned (no network needed)",
        description="Start local portals on 127.0.0.1, one for each way a host uses "
        "Retry-After, crawl them through the adapter on virtual time, and show what it "
        "learned about each: category, evidence, limit, and every wait with its reason.",
    )
    demo.add_argument(
        "--store", metavar="SPEC", help="keep what was learned in this store (default: memory)"
    )
    demo.add_argument("--quick", action="store_true", help="a small, fast run (a few seconds)")
    demo.add_argument("--urls", type=int, metavar="N", help="requests per portal (default 300)")
    demo.add_argument(
        "--speed",
        type=float,
        default=25.0,
        metavar="X",
        help="virtual seconds per real second when sleeping (default 25; 0: no real delay)",
    )
    demo.add_argument(
        "--progress",
        choices=("auto", "rich", "plain", "none"),
        default="auto",
        help="how to show progress (default: rich on a terminal when installed, else plain)",
    )
    demo.add_argument("--plain", action="store_true", help="same as --progress plain")
    demo.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the adapters' jitter (default 0: every run prints the same)",
    )
    demo.add_argument(
        "--html",
        metavar="FILE",
        help="also write this run's HTML report (its waits and give-ups included) to FILE",
    )
    demo.add_argument(
        "--port-base",
        type=int,
        metavar="PORT",
        help=f"first port to try for the portals (default {DEMO_PORT_BASE}; 0: any free port)",
    )
    demo.set_defaults(func=_cmd_demo)

    report = sub.add_parser(
        "report",
        help="show what a store knows about each host",
        description="Every host in a store: category, observations, learned limit against "
        "the documented one, hold, last change. A table by default.",
    )
    report.add_argument("--store", metavar="SPEC", help=store_help)
    report.add_argument("--json", action="store_true", help="print JSON instead of a table")
    report.add_argument(
        "--html", metavar="FILE", help="write a self-contained HTML page with charts to FILE"
    )
    report.set_defaults(func=_cmd_report)

    run = sub.add_parser(
        "run",
        usage=f"{PROG} run [-h] [--store SPEC] [-v] (script.py | -m MODULE) [args ...]",
        help="run a script with the adapter mounted on every requests.Session",
        description="Run an unmodified Python script (or a module with -m) with a "
        "RetryAfterAdapter mounted on every requests.Session it creates, including the ones "
        "behind requests.get() and friends. Arguments after the script go to the script.",
    )
    run.add_argument("--store", metavar="SPEC", help=store_help)
    run.add_argument("-v", "--verbose", action="store_true", help="print each decision")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    run.add_argument("argv", nargs="*", metavar="script.py [args ...]", help=argparse.SUPPRESS)
    run.set_defaults(func=_cmd_run)

    get = sub.add_parser(
        "get",
        help="one GET through the adapter, printing each decision",
        description="Send one GET through the adapter, printing each decision (waits, "
        "ignored headers, category changes) to stderr as it happens, then the status and a "
        "short preview of the body. Exit status 1 for an HTTP status of 400 or more.",
    )
    get.add_argument("url", metavar="URL")
    get.add_argument(
        "-v", "--verbose", action="store_true", help="also print request and response headers"
    )
    get.add_argument(
        "-H",
        "--header",
        action="append",
        metavar="'NAME: VALUE'",
        help="add a request header (repeatable)",
    )
    get.add_argument(
        "--timeout", type=float, default=30.0, metavar="S", help="socket timeout (default 30)"
    )
    get.add_argument(
        "--preview", type=int, default=500, metavar="N", help="characters of body to show"
    )
    get.add_argument("--store", metavar="SPEC", help=store_help)
    get.set_defaults(func=_cmd_get)

    forget = sub.add_parser(
        "forget",
        help="drop everything a store knows of a host",
        description="Delete a host's entry from a store: category, evidence, learned limit, "
        "hold and shared wait. The next request to it starts from nothing. A worker that is "
        "running keeps what it has in memory and may write it back. Exit status 1 when the "
        "store does not know the host.",
    )
    forget.add_argument("host", metavar="HOST", help="host or host:port (or a URL of it)")
    forget.add_argument("--store", metavar="SPEC", help=store_help)
    forget.set_defaults(func=_cmd_forget)

    unhold = sub.add_parser(
        "unhold",
        help="clear a host's hold and shared wait in a store",
        description="Clear a host's hold (calls raise HostHeld until it ends) and its shared "
        "wait, keeping what was learned. Times are shown in UTC. Exit status 1 when the "
        "store does not know the host.",
    )
    unhold.add_argument("host", metavar="HOST", help="host or host:port (or a URL of it)")
    unhold.add_argument("--store", metavar="SPEC", help=store_help)
    unhold.set_defaults(func=_cmd_unhold)
    return parser


def _split_run(argv: List[str]) -> Optional[argparse.Namespace]:
    """Parse ``run``'s options by hand: everything from the script on belongs to the script
    (argparse would take the script's own ``-v`` or ``--store`` for ours)."""
    if not argv or argv[0] != "run":
        return None
    ns = argparse.Namespace(command="run", store=None, verbose=False, module=None, argv=[])
    ns.func = _cmd_run
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in ("-h", "--help"):
            return None  # argparse prints the help
        if arg in ("-v", "--verbose"):
            ns.verbose = True
        elif arg == "--store" or arg == "-m":
            if i + 1 >= len(argv):
                raise CliError(f"run: {arg} needs a value", EXIT_USAGE)
            if arg == "-m":
                ns.module = argv[i + 1]
                ns.argv = argv[i + 2 :]
                return ns
            ns.store = argv[i + 1]
            i += 1
        elif arg.startswith("--store="):
            ns.store = arg.partition("=")[2]
        elif arg.startswith("-m") and len(arg) > 2:
            ns.module = arg[2:]
            ns.argv = argv[i + 1 :]
            return ns
        elif arg.startswith("-"):
            raise CliError(f"run: unknown option {arg!r} (see {PROG} run --help)", EXIT_USAGE)
        else:
            break
        i += 1
    ns.argv = argv[i:]
    return ns


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; return the exit status (never raises for a user error).

    Args:
        argv: the arguments, without the program name (default ``sys.argv[1:]``).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    with _library_warnings_on_stderr():
        return _main(args_list)


class _StderrWarnings(logging.Handler):
    """Shows the library's warnings (a store file moved aside, a bad stored entry dropped) on
    the ``sys.stderr`` of the moment, as ``requests-retryafter: warning: ...`` lines, with
    anything URL-like redacted."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        #: Set by a command that prints (or collects) each decision itself: the adapter's log
        #: records of those decisions would say the same thing twice.
        self.skip_decisions = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.skip_decisions and record.name == _ADAPTER_LOGGER and record.funcName == "_emit":
            return
        try:
            text = redact_text(record.getMessage())
            level = record.levelname.lower()
            print(f"{PROG}: {level}: {text}", file=sys.stderr, flush=True)
        except Exception:  # logging must never break the command
            self.handleError(record)


#: The logger whose ``_emit`` records each decision (also given to ``on_decision``).
_ADAPTER_LOGGER = __name__.rpartition(".")[0] + ".adapter"


def _decisions_shown() -> None:
    """Tell the warnings handler that this command shows every decision itself."""
    for handler in logging.getLogger(__name__.rpartition(".")[0]).handlers:
        if isinstance(handler, _StderrWarnings):
            handler.skip_decisions = True


@contextlib.contextmanager
def _library_warnings_on_stderr() -> Iterator[None]:
    """Install a :class:`_StderrWarnings` handler on the library's logger for the command's
    duration (once: a nested ``main()``, as from a script under ``run``, adds no second)."""
    library = logging.getLogger(__name__.rpartition(".")[0])
    if any(isinstance(h, _StderrWarnings) for h in library.handlers):
        yield
        return
    handler = _StderrWarnings()
    library.addHandler(handler)
    try:
        yield
    finally:
        library.removeHandler(handler)


def _main(args_list: List[str]) -> int:
    try:
        args = _split_run(args_list)
        if args is None:
            parser = build_parser()
            try:
                args = parser.parse_args(args_list)
            except _ParserExit as exc:
                return exc.status
            if args.command is None:
                parser.print_help(sys.stderr)
                return EXIT_USAGE
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except CliError as exc:
        print(f"{PROG}: {redact_text(str(exc))}", file=sys.stderr)
        return exc.code
    except ConfigurationError as exc:
        print(f"{PROG}: configuration error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_FAILURE
    except Exception as exc:  # one redacted line, never a traceback with secrets
        print(
            f"{PROG}: internal error (please report it): {type(exc).__name__}: "
            f"{redact_text(str(exc))}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
