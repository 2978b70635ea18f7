"""Why model text can never run as code here, and the guards that make sure.

What we found (math-verify 0.9.0, latex2sympy2_extended 1.11.0, sympy 1.14):

* ``sympy.parse_expr`` and ``sympy.sympify(<str>)`` run Python ``eval`` on the
  (token-rewritten) text: ``sympify("__import__('os').system('...')")`` executes.
  They must never see model text.
* ``math_verify.parse`` reaches ``parse_expr`` through one path only: the
  ``ExprExtractionConfig`` target (``parser.extract_expr``), on a regex match
  limited to digits, ``.``, spaces and ``+-*/^()×÷``.  No names can get through,
  so no calls or attribute access, but it is still ``eval``.  We never enable that
  target: answers are parsed with ``LatexExtractionConfig`` only.
* latex2sympy2_extended builds sympy objects from an ANTLR parse tree.  Its only
  ``parse_expr`` call is for the ``variable_values`` argument, which math-verify
  never passes; its ``sympify`` calls (``logic.py``, ``sets.py``) get sympy objects
  that the tree walk made, not strings.  Unknown commands become
  ``sympy.Function(name)`` / ``Symbol(name)``: a name, never evaluated.  Its
  ``getattr(sympy, name)`` calls use fixed names from the grammar (trig, max/min,
  gcd/lcm).
* math-verify's ``verify`` compares sympy objects with sympy operations (strict
  ``_sympify``, which refuses strings) and falls back to ``str == str``.

So no path evaluates model text once the Expr target is off.  Defence in depth,
installed in every worker process by :func:`install_guards`:

1. ``math_verify.parser.parse_expr`` is replaced by a wrapper that refuses any
   text outside ``[0-9.+-*/() whitespace]``; latex2sympy's ``parse_expr`` is
   replaced by one that always refuses.
2. A ``sys.addaudithook`` tripwire in the worker refuses process creation
   (``os.system``, ``subprocess``, ``exec*``, ``fork``), sockets, and file
   writes/removals; each refusal is counted.  Audit hooks are not a sandbox
   against arbitrary Python, but they turn a bug in the above into a refused
   call instead of a side effect.
3. The worker runs with an address-space limit (``RLIMIT_AS``) so that a huge
   number (``9^{9^{9^9}}``) fails with MemoryError instead of eating the machine,
   and every check has a hard time limit enforced by the parent (the worker is
   killed and replaced).
"""

from __future__ import annotations

import re
import sys

_SAFE_EXPR = re.compile(r"[0-9.\s+\-*/()]*")

# Audit events refused in a worker.  Opening files for reading stays allowed
# (lazy imports need it).
_BLOCKED_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "subprocess.Popen",
        "pty.spawn",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "os.remove",
        "os.rmdir",
        "os.rename",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "shutil.rmtree",
        "shutil.copyfile",
        "shutil.move",
        "ctypes.dlopen",
        "webbrowser.open",
    }
)
_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND

blocked_count = 0
_installed = False


def _audit(event: str, args: tuple) -> None:
    global blocked_count
    if event in _BLOCKED_EVENTS:
        blocked_count += 1
        raise PermissionError(f"serl reward worker refuses {event}")
    if event == "open" and len(args) >= 2:
        mode, flags = args[1], (args[2] if len(args) > 2 else 0)
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writes and args[0] not in (None,) and not isinstance(args[0], int):
            blocked_count += 1
            raise PermissionError("serl reward worker refuses to write files")


def guarded_parse_expr(text, *args, **kwargs):
    """``sympy.parse_expr`` for arithmetic on digits only; anything else refused."""
    if not isinstance(text, str) or not _SAFE_EXPR.fullmatch(text):
        raise ValueError("serl: parse_expr refused non-arithmetic text")
    from sympy.parsing.sympy_parser import parse_expr

    return parse_expr(text, *args, **kwargs)


def _refuse_parse_expr(*args, **kwargs):
    raise ValueError("serl: parse_expr is disabled in reward workers")


def patch_parsers() -> None:
    """Swap the two ``parse_expr`` references the parsing stack holds."""
    import latex2sympy2_extended.latex2sympy2 as l2s
    import math_verify.parser as mvp

    mvp.parse_expr = guarded_parse_expr
    l2s.parse_expr = _refuse_parse_expr


def install_guards(max_memory_mb: int | None = None) -> None:
    """Install every guard in this process.  Only for worker processes: the
    audit hook cannot be removed again."""
    global _installed
    if _installed:
        return
    patch_parsers()
    if max_memory_mb:
        import resource

        limit = int(max_memory_mb) * 1024 * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    sys.addaudithook(_audit)
    _installed = True
