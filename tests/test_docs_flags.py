"""Every `keras-attn VERB ... --flag` the README and the guides write is
a flag that verb takes: a command in the docs is one the parser accepts
as far as its flags go (the command-line reference is generated from the
same parser)."""

import argparse
import glob
import os
import re
import shlex

import pytest

from tests.paths import ROOT

PAGES = ["README.md"] + sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    if not os.path.basename(p).endswith("-history.md")
)
# A command in a code block's line, or in an inline code span.
COMMAND = re.compile(r"(?:^|`)(keras-attn(?: [^`\n]*)?)", re.M)


def subcommands():
    """`(the parser, {verb: its subparser})` of `keras-attn`."""
    from keras_attn_cli.parser import build_parser

    parser = build_parser()
    (commands,) = [
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ]
    return parser, commands.choices


def verbs():
    """`{verb: its flags}`, each with the flags every verb takes."""
    parser, subs = subcommands()
    common = set(parser._option_string_actions)
    return {
        verb: common | set(sub._option_string_actions)
        for verb, sub in subs.items()
    }


def commands(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    for match in COMMAND.finditer(text):
        line = match.group(1).split(" #")[0].rstrip("\\ ")
        try:
            words = shlex.split(line)
        except ValueError:  # a quote the span cuts
            words = line.split()
        yield words[1:]


def unknown_flags(words, known):
    """The flags of `words` (a command line after `keras-attn`) that its
    verb does not take, or `None` when it names no verb."""
    verb = next((w for w in words if not w.startswith("-")), None)
    if verb not in known:
        return None
    flags = {
        w.split("=")[0]
        for w in words
        if re.fullmatch(r"--?[a-z][\w-]*(=.*)?", w)
    }
    return sorted(flags - known[verb])


def test_the_check_reads_a_command_as_the_parser_would():
    known = {"serve": {"--port", "--prefer", "-h"}}
    assert unknown_flags(["serve", "--port", "8501"], known) == []
    assert unknown_flags(["serve", "--prot", "1"], known) == ["--prot"]
    assert unknown_flags(["serve", "--prefer=litert"], known) == []
    assert unknown_flags(["MODEL.keras"], known) is None


@pytest.mark.parametrize("page", PAGES)
def test_every_flag_the_docs_give_a_verb_is_the_verbs(page):
    known = verbs()
    wrong = []
    for words in commands(page):
        found = unknown_flags(words, known)
        if found:
            wrong.append((" ".join(words)[:80], found))
    assert not wrong, wrong


def shown_default(cell):
    """A table cell's default as a value: `1 MiB`, `100,000`, `10 s`,
    `auto: ...`."""
    text = cell.strip("`").split(":")[0].strip()
    number = re.fullmatch(r"([\d,.]+)\s*(MiB|KiB|s|ms)?", text)
    if number is None:
        return text
    value = float(number.group(1).replace(",", ""))
    return value * {"MiB": 1 << 20, "KiB": 1 << 10}.get(number.group(2), 1)


def test_the_defaults_the_docs_tabulate_are_the_parsers():
    _, subs = subcommands()
    actions = {
        flag: action
        for sub in subs.values()
        for action in sub._actions
        for flag in action.option_strings
    }
    checked = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = f.read().splitlines()
        header = None
        for line in lines:
            if not line.startswith("|"):
                header = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = [c.lower() for c in cells]
                continue
            if len(header) < 2 or header[1] != "default":
                continue
            flag = cells[0].strip("`")
            if flag in actions:
                default = actions[flag].default
                shown = shown_default(cells[1])
                if isinstance(default, (int, float)):
                    assert shown == float(default), (page, flag, cells[1])
                else:
                    assert shown == str(default or "auto"), (page, flag)
                checked.append(flag)
    assert "--max-body-bytes" in checked and len(checked) >= 6, checked
