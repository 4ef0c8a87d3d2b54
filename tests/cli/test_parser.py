"""The command line's flag tables (`keras_attn_cli.parser`) imports
nothing heavy, so its choices and defaults are copies of the library's:
these tests tie each copy to its owner."""

import pytest

from keras_attn_cli import parser


def choices(command, flag):
    built = parser.build_parser()
    sub = next(
        a
        for a in built._actions
        if getattr(a, "choices", None) and command in a.choices
    )
    action = next(
        a for a in sub.choices[command]._actions if flag in a.option_strings
    )
    return tuple(action.choices), action.default


def test_quantize_choices_are_the_exporters():
    from keras_attn.export import QUANTIZATIONS

    assert choices("export", "--quantize") == (tuple(QUANTIZATIONS), "none")


def test_accelerator_choices_are_the_runtimes():
    from keras_attn_runtime.engine import ACCELERATORS

    (action,) = [
        a
        for a in parser.build_parser()._actions
        if "--accelerator" in a.option_strings
    ]
    assert tuple(action.choices) == ACCELERATORS and action.default == "cpu"


def test_serve_defaults_and_log_levels_are_the_servers():
    pytest.importorskip("kserve")
    from keras_attn_cli.serving import serve, served
    from keras_attn_cli.serving.limits import LIMITS

    defaults = {flag: default for flag, _, default, _ in parser.SERVE_FLAGS}
    for key, value in {**LIMITS, **served.BATCHING}.items():
        assert defaults["--" + key.replace("_", "-")] == value, key
    assert choices("serve", "--log-level") == (serve.LOG_LEVELS, "info")


def test_max_streams_takes_a_number_or_auto(capsys):
    build = parser.build_parser()
    assert (
        build.parse_args(["serve", "--max-streams", "auto"]).max_streams is None
    )
    assert build.parse_args(["serve"]).max_streams is None
    assert build.parse_args(["serve", "--max-streams", "12"]).max_streams == 12
    # A number that is not positive is `serve`'s to refuse, naming it.
    assert build.parse_args(["serve", "--max-streams", "0"]).max_streams == 0
    with pytest.raises(SystemExit):
        build.parse_args(["serve", "--max-streams", "many"])
    err = capsys.readouterr().err
    assert "--max-streams: expected a number or auto, got 'many'" in err


def test_prefer_offers_the_kinds_the_opener_reads():
    from keras_attn_cli.parser import FILE_KINDS, build_parser
    from keras_attn_runtime.opener import KINDS

    assert FILE_KINDS == KINDS
    args = build_parser().parse_args(["serve", "m", "--prefer", "litert"])
    assert args.prefer == "litert"
    assert build_parser().parse_args(["serve", "m"]).prefer is None
