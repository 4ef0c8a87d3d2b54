"""The docs site's generated pages, written at every build by
`mkdocs-gen-files` (`mkdocs.yml`), so that no reference can fall behind
the code:

- `index.md`, `benchmarks.md`, `changelog.md` and `license.md`:
  README.md, BENCHMARKS.md, CHANGELOG.md and LICENSE, their links
  rewritten for the site (a link to anything else fails the build);
- `reference/api/<module>.md`: one `:::` block (mkdocstrings) for each
  public name of each public module (its `__all__`, else the classes and
  functions it defines);
- `reference/cli.md`: every `keras-attn` command and flag, from the
  parser itself (`keras_attn_cli.parser.build_parser`).

`python tools/docs_site.py` prints the pages' names (the tests read the
same functions).
"""

import argparse
import importlib
import inspect
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The modules whose public names the API reference documents, and what
# each holds.
API = {
    "keras_attn": "The layers, the decoder and the review standardizer.",
    "keras_attn.models": "The decoder-only model and its generator.",
    "keras_attn.seq2seq": "Attention decoders, searches and samplers.",
    "keras_attn.translation": "The translator and its files.",
    "keras_attn.export": "Every exporter and its checks.",
    "keras_attn.explain": "Attributions and the attention read back.",
    "keras_attn.beam": "Apache Beam handlers of SavedModels.",
    "keras_attn_runtime": "The runtime: LiteRT and ONNX without TensorFlow.",
    "keras_attn_runtime.beam": "Apache Beam handlers of LiteRT files.",
}
# The top-level files the site shows, under the names it gives them.
PAGES = {
    "README.md": "index.md",
    "BENCHMARKS.md": "benchmarks.md",
    "CHANGELOG.md": "changelog.md",
    "LICENSE": "license.md",
}
LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?P<anchor>#[^)\s]*)?\)")


def public_names(module_name):
    """The public names of `module_name`: its `__all__`, else the
    classes and functions it defines."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and (inspect.isclass(value) or inspect.isfunction(value))
            and getattr(value, "__module__", None) == module_name
        ]
    return [n for n in names if n != "__version__"]


def api_page(module_name):
    """The markdown of `module_name`'s reference page."""
    lines = [f"# `{module_name}`", "", API[module_name], ""]
    for name in public_names(module_name):
        lines += [f"::: {module_name}.{name}", ""]
    return "\n".join(lines)


def _command_parsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _flag_rows(parser):
    rows = ["| flag | default | what it does |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(f"`{n}`" for n in action.option_strings)
        if not names:
            names = f"`{action.metavar or action.dest}` (positional)"
        text = " ".join((action.help or "").split()).replace("|", "\\|")
        if action.choices is not None:
            shown = ", ".join(f"`{c}`" for c in action.choices)
            text += f" (one of {shown})"
        default = action.default
        shown = (
            "–"
            if default in (None, False, argparse.SUPPRESS) or action.nargs == 0
            else f"`{default}`"
        )
        rows.append(f"| {names} | {shown} | {text} |")
    return rows


def cli_page():
    """The markdown of the command line's reference page."""
    from keras_attn_cli.parser import build_parser

    parser = build_parser()
    lines = [
        "# The `keras-attn` command",
        "",
        "Generated from the command's own parser: every command and flag.",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
        "## Flags of every command",
        "",
        *_flag_rows(parser),
    ]
    for name, text, sub in _command_parsers(parser):
        usage = sub.format_usage().strip()
        lines += ["", f"## `{name}`", "", text or "", "", "```text", usage]
        lines += ["```", "", *_flag_rows(sub)]
    return "\n".join(lines) + "\n"


def site_links(text, source, under_docs=False):
    """`text` (the file `source`) with its links made the site's:
    `docs/x` is `x`, the top-level pages go by their site names; under
    `docs/` (`under_docs`) only links that leave it (`../X`) change. A
    link to anything else in the repository is a `ValueError` naming
    it."""

    def fix(match):
        target, anchor = match.group("target"), match.group("anchor") or ""
        if "://" in target or target.startswith("mailto:"):
            return match.group(0)
        if under_docs and not target.startswith("../"):
            return match.group(0)
        path = os.path.normpath(target).replace(os.sep, "/")
        if under_docs:
            path = path[len("../") :]
        if path.startswith("docs/"):
            path = path[len("docs/") :]
        elif path in PAGES:
            path = PAGES[path]
        else:
            raise ValueError(
                f"{source} links to {target!r}, which the site does not "
                f"hold: link a page under docs/ or one of {sorted(PAGES)}"
            )
        return f"]({path}{anchor})"

    return LINK.sub(fix, text)


def site_page(source):
    """A top-level file as a page of the site (`site_links`)."""
    with open(os.path.join(ROOT, source), encoding="utf-8") as f:
        text = f.read()
    if source == "LICENSE":
        return f"# License\n\n```text\n{text}```\n"
    return site_links(text, source)


def on_page_markdown(markdown, page, **kwargs):
    """MkDocs' hook: a page under docs/ that links out of it (`../X`)
    links to the site's page of `X`."""
    return site_links(markdown, f"docs/{page.file.src_uri}", under_docs=True)


def pages():
    """`{site path: markdown}` of every generated page."""
    out = {PAGES[source]: site_page(source) for source in PAGES}
    for module_name in API:
        out[f"reference/api/{module_name}.md"] = api_page(module_name)
    out["reference/cli.md"] = cli_page()
    return out


def write_with_gen_files():
    import mkdocs_gen_files

    for path, text in pages().items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)


if __name__ == "<run_path>":  # run by mkdocs-gen-files at a build
    write_with_gen_files()
elif __name__ == "__main__":
    print("\n".join(sorted(pages())))
