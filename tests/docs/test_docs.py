"""Docs that run: every fenced ``python``, ``sh``, ``bash`` and ``console`` block of README.md,
CONTRIBUTING.md and docs/*.md (a glob: new docs are picked up) is run against one real sandbox
per test session, or is preceded, on the line just before its fence, by
``<!-- not run: REASON -->``.

Sybil finds the blocks (its Markdown fence lexer) and turns each into an example with its line
number; the evaluators here run it as a reader would, in a fresh process:

- ``python``: saved as ``block.py`` and run with this interpreter. It must exit 0, and print
  nothing on stderr unless it configures ``logging`` itself (the library is quiet). A block that
  defines ``test_...`` functions is a pytest module and runs under pytest (with pytest-trio).
  A *fragment* (top-level ``await``, ``async with`` or ``async for``, as reference pages show
  calls) runs as the body of ``async with walkit.Client.connect(WALKIT_METADATA) as client:``
  in ``trio.run``, after the fragments above it on the same page (so it can use their names).
- ``sh`` / ``bash``: run by ``bash -euo pipefail``; it must exit 0.
- ``console``: the ``$ `` lines are the commands, run the same way; the rest is sample output.

Every block runs in a temporary directory laid out like the repository (its top-level entries,
``.venv`` included, are symlinked there, so ``.venv/bin/walkit`` and ``examples/...`` resolve as
they do from a clone), with ``WALKIT_METADATA`` set to the sandbox's metadata URL and the
virtualenv's ``bin`` first on ``PATH``. A block has ``BLOCK_TIMEOUT`` seconds.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
import pytest
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from tests._sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "sh", "bash", "console")
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>\S.*?) -->")
BLOCK_TIMEOUT = 120
#: Top-level entries of the repository not mirrored into a block's directory: the blocks' own
#: state (a sandbox started by a block, say) must not land in the clone.
NOT_MIRRORED = {".git", "sandbox", ".walkit"}

pytestmark = pytest.mark.processes


@attrs.frozen
class Block:
    language: str
    source: str
    not_run: str | None  # the reason, for a block marked not run
    fragment: bool = False  # Python with top-level await: see the module's docstring
    prelude: tuple[str, ...] = ()  # the fragments above it on the same page, run first


#: Runs fragments (argv: the files, in order) in one client session, one namespace.
FRAGMENT_HARNESS = """
import ast, os, sys, trio, walkit

async def main():
    async with walkit.Client.connect(os.environ["WALKIT_METADATA"]) as client:
        namespace = {"__name__": "__main__", "client": client}
        for path in sys.argv[1:]:
            namespace["client"] = client  # a block may have rebound (and closed) its own
            with open(path) as file:
                code = compile(file.read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if result is not None:
                await result

trio.run(main)
"""


def is_fragment(source: str) -> bool:
    """True for Python that compiles only with top-level await allowed."""
    try:
        compile(source, "<block>", "exec")
    except SyntaxError:
        try:
            compile(source, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:
            return False
        return True
    return False


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def _line_before(text: str, position: int) -> str:
    lines = text[:position].split("\n")
    return lines[-2] if len(lines) >= 2 else ""


def parse_blocks(document: Document) -> Iterable[Region]:
    """The Sybil parser: one region per fenced block in one of ``LANGUAGES``."""
    lexer = FencedCodeBlockLexer(language="|".join(LANGUAGES))
    fragments: list[str] = []
    for region in lexer(document):
        marker = NOT_RUN.fullmatch(_line_before(document.text, region.start).strip())
        language = str(region.lexemes["language"])
        source = str(region.lexemes["source"])
        fragment = language == "python" and marker is None and is_fragment(source)
        region.parsed = Block(
            language=language,
            source=source,
            not_run=marker["reason"] if marker else None,
            fragment=fragment,
            prelude=tuple(fragments),
        )
        if fragment:
            fragments.append(source)
        region.evaluator = evaluate
        yield region


SYBIL = Sybil(
    parsers=[parse_blocks], path=str(REPO), patterns=["README.md", "CONTRIBUTING.md", "docs/*.md"]
)


def examples() -> Iterator[object]:
    for path in documents():
        for example in SYBIL.parse(path):
            yield pytest.param(example, id=f"{path.relative_to(REPO)}:{example.line}")


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "clone"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in NOT_MIRRORED:
            (work / entry.name).symlink_to(entry)
    return work


def _run(command: list[str], example: Example) -> str:
    """Run ``command`` for ``example``; fail the test with its output unless it exits 0.

    The block runs in a session of its own, killed whole at the end: nothing it started (in the
    background, or still running at the timeout) outlives it."""
    process = subprocess.Popen(
        command,
        cwd=example.namespace["cwd"],
        env=example.namespace["env"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_session(process.pid)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"{example.path}:{example.line}: still running after {BLOCK_TIMEOUT} s "
            f"(mark it `<!-- not run: REASON -->` if it is meant to run until stopped)\n"
            f"--- stdout\n{stdout}--- stderr\n{stderr}"
        ) from None
    finally:
        _kill_session(process.pid)
    assert process.returncode == 0, (
        f"{example.path}:{example.line}: exit code {process.returncode}\n"
        f"--- stdout\n{stdout}--- stderr\n{stderr}"
    )
    return stderr


def _kill_session(session: int) -> None:
    try:
        os.killpg(session, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _check_quiet(stderr: str, block: Block, example: Example) -> None:
    if "logging." not in block.source:
        assert stderr == "", (
            f"{example.path}:{example.line}: the library printed on stderr although the "
            f"program configures no logging:\n{stderr}"
        )


def evaluate(example: Example) -> None:
    block: Block = example.parsed
    cwd: Path = example.namespace["cwd"]
    if block.language == "python" and block.fragment:
        paths = []
        for number, source in enumerate([*block.prelude, block.source]):
            paths.append(cwd / f"fragment_{number}.py")
            paths[-1].write_text(source)
        _check_quiet(
            _run([sys.executable, "-c", FRAGMENT_HARNESS, *map(str, paths)], example),
            block,
            example,
        )
        return
    if block.language == "python":
        script = cwd / "block.py"
        script.write_text(block.source)
        if re.search(r"^(async )?def test_", block.source, re.MULTILINE):
            script = script.rename(cwd / "test_block.py")
            _run(
                [
                    sys.executable,
                    *("-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "trio_mode=true"),
                    *("--rootdir", str(cwd), str(script)),
                ],
                example,
            )
            return
        _check_quiet(_run([sys.executable, str(script)], example), block, example)
        return
    if block.language == "console":
        source = "\n".join(line[2:] for line in block.source.splitlines() if line.startswith("$ "))
    else:
        source = block.source
    script = cwd / "block.sh"
    script.write_text(source)
    _run(["bash", "-euo", "pipefail", str(script)], example)


@pytest.mark.parametrize("example", list(examples()))
def test_doc_block(example: Example, walkit_sandbox: Sandbox, tmp_path: Path) -> None:
    block: Block = example.parsed
    if block.not_run is not None:
        where = f"{Path(example.path).relative_to(REPO)}:{example.line}"
        pytest.skip(f"{where}: not run: {block.not_run}")
    env = dict(
        os.environ,
        WALKIT_METADATA=walkit_sandbox.metadata_url,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    example.namespace["env"] = env
    example.namespace["cwd"] = _workdir(tmp_path)
    example.evaluate()


def test_every_not_run_marker_is_on_the_line_before_a_block() -> None:
    misplaced = []
    for path in documents():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            if "<!-- not run" not in line:
                continue
            following = lines[number] if number < len(lines) else ""
            if not NOT_RUN.fullmatch(line.strip()) or not following.startswith("```"):
                misplaced.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not misplaced, "malformed or misplaced `<!-- not run: REASON -->` markers:\n" + (
        "\n".join(misplaced)
    )


def test_the_readme_blocks_are_collected() -> None:
    readme = [e for e in SYBIL.parse(REPO / "README.md")]
    assert sum(1 for e in readme if e.parsed.not_run is None and e.parsed.language == "python") >= 3
    assert any(e.parsed.language == "sh" and e.parsed.not_run is None for e in readme)


SAMPLE_PAGE = """# A page

<!-- not run: serves until stopped -->
```sh
walkit sandbox
```

```python
import trio

client_id = id(client)
await trio.sleep(0)
```

```json
{"not": "collected"}
```

```console
$ echo "hello"
hello
$ test -n "$WALKIT_METADATA"
```

<!-- not run: a reason -->

```python
print("a blank line between the marker and the fence: this block runs")
```
"""


def _sample_examples(tmp_path: Path) -> list[Example]:
    page = tmp_path / "page.md"
    page.write_text(SAMPLE_PAGE)
    examples = list(SYBIL.parse(page))
    for example in examples:
        example.namespace["cwd"] = tmp_path
        example.namespace["env"] = dict(os.environ, WALKIT_METADATA="memory://docs-sample")
    return examples


def test_the_block_parser_on_a_sample_page(tmp_path: Path) -> None:
    blocks = [e.parsed for e in _sample_examples(tmp_path)]
    assert [(b.language, b.not_run, b.fragment) for b in blocks] == [
        ("sh", "serves until stopped", False),
        ("python", None, True),
        ("console", None, False),
        ("python", None, False),
    ]
    assert blocks[1].prelude == () and blocks[3].prelude == (blocks[1].source,)


def test_the_evaluators_run_blocks_and_report_failures(tmp_path: Path) -> None:
    _sh, fragment, console, program = _sample_examples(tmp_path)
    fragment.evaluate()  # with a client on memory:// (a fresh store, no bookies needed)
    console.evaluate()
    program.evaluate()
    failing = attrs.evolve(console.parsed, source="$ echo 'to stdout'\n$ false\n")
    console.region.parsed = console.parsed = failing
    with pytest.raises(AssertionError, match="exit code 1"):
        console.evaluate()
    noisy = attrs.evolve(program.parsed, source="import sys\nprint('oops', file=sys.stderr)\n")
    program.region.parsed = program.parsed = noisy
    with pytest.raises(AssertionError, match="printed on stderr"):
        program.evaluate()
