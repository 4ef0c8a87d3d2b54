"""Reading the guides' code blocks (`tests/test_docs_code.py` runs
them): which run, what each prints, the server a page starts."""

import glob
import os
import re
import shlex

from tests.paths import ROOT

# The guides (the history page records the past).
GUIDES = sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    if not os.path.basename(p).endswith("-history.md")
)
FENCE = re.compile(
    r"(?:<!-- (?P<note>not run: .*?|server) -->\n)?"
    r"```(?P<lang>[^\n`]*)\n(?P<code>.*?)```[ \t]*(?:\n|$)",
    flags=re.S,
)
SHELL = "bash"
RUN = ("python", SHELL)
# Languages a block may declare: code that runs, what it prints, and
# files shown as they are. Python and shell code go by these two names
# only, so that none hides under another.
LANGUAGES = {*RUN, "text", "json", "yaml", "protobuf", "toml"}
HTTP, GRPC = "8501", "8500"
# Files a page's blocks read, made in the scratch folder first.
INPUTS = {
    "docs/batch_inference.md": {
        "english.txt": "I am tired.\nWhere is the station?\n",
    },
    "docs/start-batch.md": {
        "reviews.txt": "A wonderful film.\nDull and far too long.\n",
    },
}
SEPARATOR = "----8<---- the end of a block ----8<----"


class Block:
    def __init__(self, match):
        # The language, before any attribute (`text title="Output"`).
        self.lang = (match.group("lang").split() or [""])[0]
        self.code = match.group("code")
        note = match.group("note") or ""
        self.why = note[len("not run: ") :] if note.startswith("not") else None
        self.server = note == "server"
        self.expected = None  # what it prints, where the page says
        self.span = match.span()

    @property
    def runs(self):
        return self.lang in RUN and self.why is None and not self.server


def blocks(page):
    """The page's fenced blocks, each `runs` one given its `expected`
    output when a ```text block follows it directly."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    found = [Block(m) for m in FENCE.finditer(text)]
    for before, after in zip(found, found[1:], strict=False):
        between = text[before.span[1] : after.span[0]]
        if before.runs and after.lang == "text" and not between.strip():
            before.expected = after.code
    return found


def runnable(page):
    return [b for b in blocks(page) if b.runs]


def matches(expected, got):
    def lines(text):
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    parts = lines(expected).split("...")
    pattern = ".*?".join(re.escape(part) for part in parts)
    return re.fullmatch(pattern, lines(got), flags=re.S) is not None


def with_ports(text, ports):
    """`text` with the page's ports (8501, 8500) replaced by the server's."""
    for shown, port in ports.items():
        text = text.replace(shown, port)
    return text


def script(page, ports):
    """One Python script of `page`'s blocks that run, a separator printed
    after each."""
    lines = [
        "import subprocess as _subprocess, sys as _sys",
        "def _shell(code):",
        "    _sys.stdout.flush()",
        "    done = _subprocess.run(['bash', '-euo', 'pipefail', '-c', code],",
        "                           capture_output=True, text=True)",
        "    _sys.stdout.write(done.stdout)",
        "    if done.returncode:",
        "        raise SystemExit(f'{code}\\nexited {done.returncode}:\\n'",
        "                         + done.stderr[-3000:])",
    ]
    for block in runnable(page):
        code = with_ports(block.code, ports)
        lines.append(code if block.lang == "python" else f"_shell({code!r})")
        lines.append(f"print('\\n' + {SEPARATOR!r}, flush=True)")
    return "\n".join(lines)


def start_server(page):
    """The page's `<!-- server -->` (a `live.start` process and the
    ports that replace the page's), or `(None, {})`."""
    found = [b for b in blocks(page) if b.server]
    if not found:
        return None, {}
    from tests.serving import live

    (block,) = found
    argv = shlex.split(block.code.strip())[2:]  # after `keras-attn serve`
    for flag in ("--port", "--grpc-port"):
        if flag in argv:
            at = argv.index(flag)
            del argv[at : at + 2]
    proc, port = live.start(*argv)
    return proc, {HTTP: str(port), GRPC: str(proc.grpc_port)}
