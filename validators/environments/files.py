"""`files`: housekeeping in a small folder of text files: list, read, write, move, delete.

State param: `files`, `{relative path: text}`, written into the episode's own folder at `reset` (a task carries its
files inline; nothing outside the episode's folder is read or written).

Paths are relative, `/`-separated and confined to the episode's folder: an absolute path, a `..` part, a NUL
character or a symbolic link on the way is refused (`ToolError`), so `../../etc/passwd` is an error, never a read.
Folders exist only as parts of file paths (a write creates them; the snapshot lists files).

Tools: `list_files(folder)`, `read_file(path)`, `write_file(path, content)` (creates or overwrites),
`move_file(source, destination)` (never overwrites), `delete_file(path)`.

The snapshot is `{"files": {path: {"content": text}}}`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from validators.environments.base import Environment, Snapshot, ToolError, tool
from validators.registry import VerifyContext

# ASCII names (at most 255 characters in all, so no part is over a file system's name limit).
PATH_CHARACTERS = r"^[A-Za-z0-9_. /-]+$"
MAX_PATH_CHARS = 255
_PATH = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PATH_CHARS,
    "pattern": PATH_CHARACTERS,
    "description": "A relative path, e.g. logs/app.log.",
}


def path_problem(path: str) -> str | None:
    """Why `path` is not a path to a file inside the folder (None when it is one).

    Example:
        >>> path_problem("logs/app.log"), path_problem("../secret"), path_problem("/etc/passwd")
        (None, "'../secret' leaves the folder", "'/etc/passwd' is absolute")
    """
    pure = PurePosixPath(path)
    if not re.match(PATH_CHARACTERS, path) or len(path) > MAX_PATH_CHARS or not pure.parts:
        return f"{path!r} is not a path of letters, digits and _ . / - (at most {MAX_PATH_CHARS})"
    if pure.is_absolute():
        return f"{path!r} is absolute"
    if ".." in pure.parts:
        return f"{path!r} leaves the folder"
    return None


class FilesEnvironment(Environment):
    """A folder of text files, one private copy per episode (tools and rules in the module docstring)."""

    name = "files"
    tools: ClassVar[list[dict[str, Any]]] = [
        tool(
            "list_files",
            "List the files under a folder, recursively ('.' for everything).",
            {"folder": {**_PATH, "description": "A relative folder, '.' for the top."}},
            ["folder"],
        ),
        tool("read_file", "Read a text file.", {"path": _PATH}, ["path"]),
        tool(
            "write_file",
            "Create or overwrite a text file (its folders are created).",
            {"path": _PATH, "content": {"type": "string"}},
            ["path", "content"],
        ),
        tool(
            "move_file",
            "Move or rename a file; refuses to overwrite an existing file.",
            {"source": _PATH, "destination": _PATH},
            ["source", "destination"],
        ),
        tool("delete_file", "Delete a file.", {"path": _PATH}, ["path"]),
    ]
    read_only_tools: ClassVar[frozenset[str]] = frozenset({"list_files", "read_file"})
    state_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["files"],
        "additionalProperties": False,
        "properties": {"files": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}},
    }

    @classmethod
    def state_problems(cls, state: Mapping[str, Any], context: VerifyContext) -> list[str]:
        paths = sorted(state["files"])
        where = "(/verifier/params/state/files)"
        problems = [f"{problem} {where}" for path in paths if (problem := path_problem(path)) is not None]
        clashes = [(a, b) for a, b in itertools.pairwise(paths) if b.startswith(a + "/")]
        return problems + [f"{a!r} is a file and a folder of {b!r} {where}" for a, b in clashes]

    def _open(self, state: Mapping[str, Any], folder: Path) -> None:
        self._root = folder / "files"
        self._root.mkdir()
        for path, content in state["files"].items():
            self._write(path, content)

    def _close(self) -> None:
        """Nothing to release: the files live in the folder `close` removes."""

    def snapshot(self) -> Snapshot:
        files = {
            path.relative_to(self._root).as_posix(): {"content": path.read_text(encoding="utf-8")}
            for path in self._root.rglob("*")
            if path.is_file() and not path.is_symlink()
        }
        return {"files": dict(sorted(files.items()))}

    def _resolve(self, path: str) -> Path:
        """The file system path of a model's relative path, refused unless it stays inside the folder."""
        problem = path_problem(path)
        if problem is not None:
            raise ToolError(problem)
        target = self._root.joinpath(*PurePosixPath(path).parts)
        for step in [target, *target.parents]:
            if step == self._root:
                return target
            if step.is_symlink():
                raise ToolError(f"{path!r} goes through a link")
        raise ToolError(f"{path!r} leaves the folder")

    def _file(self, path: str) -> Path:
        target = self._resolve(path)
        if not target.is_file():
            raise ToolError(f"no file {path!r}" + (" (it is a folder)" if target.is_dir() else ""))
        return target

    def _write(self, path: str, content: str) -> None:
        target = self._resolve(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        except OSError as exc:  # a folder where the file goes, or a file where a folder goes
            raise ToolError(f"cannot write {path!r}: {exc.strerror}") from None

    def tool_list_files(self, folder: str) -> dict[str, Any]:
        base = self._root if folder in (".", "./") else self._resolve(folder)
        if not base.is_dir():
            raise ToolError(f"no folder {folder!r}")
        files = sorted(p.relative_to(self._root).as_posix() for p in base.rglob("*") if p.is_file())
        return {"folder": folder, "files": files}

    def tool_read_file(self, path: str) -> dict[str, Any]:
        return {"path": path, "content": self._file(path).read_text(encoding="utf-8")}

    def tool_write_file(self, path: str, content: str) -> dict[str, Any]:
        self._write(path, content)
        return {"written": path, "characters": len(content)}

    def tool_move_file(self, source: str, destination: str) -> dict[str, Any]:
        origin, target = self._file(source), self._resolve(destination)
        if target.exists():
            raise ToolError(f"{destination!r} exists; delete it first or choose another name")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            origin.rename(target)
        except OSError as exc:
            raise ToolError(f"cannot move {source!r} to {destination!r}: {exc.strerror}") from None
        return {"moved": source, "to": destination}

    def tool_delete_file(self, path: str) -> dict[str, Any]:
        self._file(path).unlink()
        return {"deleted": path}
