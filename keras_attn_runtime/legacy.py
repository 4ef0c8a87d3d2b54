"""What this runtime still reads from files written by earlier
keras_attn versions, in one place, each item with the version that
removes it (`REMOVALS`; `tests/test_legacy.py` fails once the runtime's
version reaches one)."""

# (what is still read, the function here that reads it, removed in)
REMOVALS = [
    (
        '0.2 translator files, whose config says `"kind": '
        '"translator"` instead of a `format`',
        "format_of_0_2",
        "1.0",
    ),
    (
        "0.2 translator files whose `translate` signature reads a fixed "
        "`source_length`, zero-padded, instead of the sentence's length",
        "fixed_source_length",
        "1.0",
    ),
    (
        "streaming files whose config names one `start` signature and no "
        "`starts` list",
        "start_names",
        "1.0",
    ),
]


def format_of_0_2(config, translator):
    """`translator` (the translator format's name) for a 0.2 translator's
    config (`{"kind": "translator"}`), else `None`."""
    return translator if config.get("kind") == "translator" else None


def fixed_source_length(inputs):
    """Whether a `translate` signature's inputs (`get_input_details()`)
    read a fixed `source_length`, as 0.2 files do, rather than the
    sentence's own length."""
    return int(inputs["source"]["shape_signature"][-1]) != -1


def start_names(config):
    """A streaming file's start signatures: its `starts`, or its one
    `start` in files written before there could be several."""
    return config.get("starts", [config["start"]])
