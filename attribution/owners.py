"""The owners file: who owns a kernel, NVTX range or mechanism (like GitHub's CODEOWNERS).

Owns parsing the TOML owners file and the lookup rule.  The file is a list of rules::

    [[owner]]
    pattern = "*gemm*"          # fnmatch glob (case-sensitive)
    owner = "@matmul-team"

    [[owner]]
    pattern = "idle.host_stall"
    owner = "@data-loader"

A pattern is matched against the whole name: a kernel name, an NVTX range name or a mechanism
name (``kernel:<name>``, ``copy:<kind>/<memory>``, ``idle.<cause>``, ``clamp.<reason>``).  For a
``kernel:<name>`` mechanism the bare kernel name is tried as well, so a rule written for kernel
names also owns the mechanism.  As in CODEOWNERS the *last* matching rule wins; a name no rule
matches is owned by ``"unowned"``.

Pure: no I/O.  Bad files raise :class:`ValueError` naming the line (or rule) and what is wrong;
the CLI turns that into an input error naming the file.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import tomllib
from typing import Any

UNOWNED = "unowned"
KERNEL_PREFIX = "kernel:"

_RULE_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*owner[ \t]*\]\]", re.MULTILINE)
_RULE_KEYS = frozenset({"pattern", "owner"})


@dataclasses.dataclass(frozen=True, slots=True)
class OwnerRule:
    pattern: str
    owner: str
    line: int  # 1-based line of the rule's ``[[owner]]`` header (0 if unknown)
    _regex: re.Pattern[str] = dataclasses.field(repr=False, compare=False)

    def matches(self, name: str) -> bool:
        return self._regex.match(name) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class OwnerMap:
    """Ordered owner rules; :meth:`owner_for` applies the last matching one."""

    rules: tuple[OwnerRule, ...] = ()

    def owner_for(self, name: str) -> str:
        candidates = [name]
        if name.startswith(KERNEL_PREFIX):
            candidates.append(name[len(KERNEL_PREFIX):])
        for rule in reversed(self.rules):
            if any(rule.matches(c) for c in candidates):
                return rule.owner
        return UNOWNED

    def __len__(self) -> int:
        return len(self.rules)


def make_rule(pattern: str, owner: str, line: int = 0) -> OwnerRule:
    return OwnerRule(pattern, owner, line, re.compile(fnmatch.translate(pattern), re.DOTALL))


def load_owners(text: str) -> OwnerMap:
    """Parse an owners file's text; raises ValueError with the line and what is wrong."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not valid TOML: {e}") from None
    except RecursionError:  # tomllib parses nested arrays/tables recursively
        raise ValueError("not a usable owners file: nested too deeply") from None
    unknown = sorted(set(doc) - {"owner"})
    if unknown:
        raise ValueError(
            f"unknown top-level key {unknown[0]!r} (expected only [[owner]] rules)"
        )
    raw = doc.get("owner", [])
    if not isinstance(raw, list):
        raise ValueError("'owner' must be an array of tables ([[owner]] rules)")
    header_lines = [text.count("\n", 0, m.start()) + 1 for m in _RULE_HEADER.finditer(text)]
    rules: list[OwnerRule] = []
    for i, entry in enumerate(raw):
        line = header_lines[i] if i < len(header_lines) else 0
        rules.append(_rule(entry, i + 1, line))
    return OwnerMap(tuple(rules))


def _rule(entry: Any, number: int, line: int) -> OwnerRule:
    where = f"line {line}: owner rule #{number}" if line else f"owner rule #{number}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a table with 'pattern' and 'owner'")
    extra = sorted(set(entry) - _RULE_KEYS)
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r} (expected 'pattern' and 'owner')")
    for key in ("pattern", "owner"):
        if key not in entry:
            raise ValueError(f"{where}: missing {key!r}")
        value = entry[key]
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return make_rule(entry["pattern"], entry["owner"].strip(), line)
