"""The progress line: drawn in place on a terminal, wiped at the end,
never written to a file or a pipe."""

import io

from keras_attn_cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_sees_the_count_move_and_then_a_clean_line():
    screen = Terminal()
    with Progress("translating", 3, stream=screen) as progress:
        for done in (1, 2, 3):
            progress.update(done)
    drawn = screen.getvalue()
    assert "\rtranslating 2/3" in drawn and "\rtranslating 3/3" in drawn
    assert drawn.endswith("\r" + " " * len("translating 3/3") + "\r")


def test_a_file_or_a_pipe_gets_nothing():
    stream = io.StringIO()  # isatty() is False
    with Progress("translating", 3, stream=stream) as progress:
        progress.update(2)
    assert stream.getvalue() == ""


def test_one_item_needs_no_progress():
    screen = Terminal()
    with Progress("translating", 1, stream=screen) as progress:
        progress.update(1)
    assert screen.getvalue() == ""
