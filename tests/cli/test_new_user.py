"""What a new user met with the docs in hand, each case failing first:
commands that refused a model the docs name, text with no word that
was translated anyway, errors that wrote or printed before failing,
lines that went missing."""

import os
import sys

import pytest

import keras_attn_cli
from tests.paths import ROOT

SHIPPED = os.path.join(ROOT, "saved_models")
LITERT_TRANSLATOR = os.path.join(SHIPPED, "translation_en_fr", "model.tflite")

pytest.importorskip("ai_edge_litert")


def cli(capsys, *args):
    code = keras_attn_cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refused(code, out, err, needle):
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-attn: error:"), err
    assert needle in lines[0], err
    assert out == "", out  # nothing printed before the error


def needs(path):
    if not os.path.exists(path):
        pytest.skip(f"no shipped {os.path.basename(path)}")
    return path


@pytest.mark.parametrize(
    "model",
    ["imdb_edge", "imdb_micro", os.path.join(SHIPPED, "imdb_edge")],
)
def test_explain_takes_the_edge_files_by_name_or_folder(
    model, capsys, tmp_path
):
    needs(os.path.join(SHIPPED, "imdb_edge"))
    code, out, err = cli(
        capsys, "explain", model, "A wonderful film.", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["attention.html", "attention.png"]


def test_translate_takes_the_one_call_litert_file(capsys):
    from keras_attn_runtime import LiteRTTranslator

    needs(LITERT_TRANSLATOR)
    sentences = ["I am tired.", "We will go home."]
    code, out, err = cli(
        capsys, "translate", "--model", LITERT_TRANSLATOR, *sentences
    )
    assert code == 0, err
    want = LiteRTTranslator(LITERT_TRANSLATOR).translate(sentences)
    assert [f"{s}  ->  {w}" for s, w in zip(sentences, want, strict=True)] == [
        line for line in out.splitlines() if "->" in line
    ]


@pytest.mark.parametrize("text", ["\U0001f3ac\U0001f37f", "?!", " ... "])
def test_a_sentence_without_a_letter_or_digit_is_refused(
    text, capsys, tmp_path
):
    needs(LITERT_TRANSLATOR)
    code, out, err = cli(
        capsys, "translate", "--model", LITERT_TRANSLATOR, text
    )
    refused(code, out, err, "at least one letter or digit")
    picture = tmp_path / "a.png"
    code, out, err = cli(
        capsys, "align", LITERT_TRANSLATOR, text, "--out", str(picture)
    )
    refused(code, out, err, "at least one letter or digit")
    assert not picture.exists()


def test_a_clause_too_long_is_refused_before_anything_is_printed(capsys):
    from keras_attn_runtime import LiteRTTranslator

    needs(LITERT_TRANSLATOR)
    limit = LiteRTTranslator(LITERT_TRANSLATOR).length
    text = " ".join(["word"] * (limit + 5))  # one clause: nothing to cut at
    code, out, err = cli(
        capsys, "translate", "--model", LITERT_TRANSLATOR, text
    )
    refused(code, out, err, f"at most {limit}")
    assert "truncate=True" not in err  # a Python argument, not a flag


def test_without_matplotlib_explain_and_align_write_and_print_nothing(
    capsys, tmp_path, monkeypatch
):
    needs(os.path.join(SHIPPED, "imdb_edge"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out_dir = tmp_path / "x"
    code, out, err = cli(
        capsys, "explain", "imdb_edge", "A fine film.", "--out", str(out_dir)
    )
    refused(code, out, err, "'matplotlib'")
    assert not out_dir.exists()
    needs(LITERT_TRANSLATOR)
    picture = tmp_path / "a.png"
    code, out, err = cli(
        capsys, "align", LITERT_TRANSLATOR, "I am tired.", "--out", str(picture)
    )
    refused(code, out, err, "'matplotlib'")
    assert not picture.exists()


def test_a_missing_path_says_it_does_not_exist(capsys, tmp_path):
    missing = str(tmp_path / "nothing_here")
    code, out, err = cli(capsys, "predict", missing, "a fine film")
    refused(code, out, err, "which does not exist")
    code, out, err = cli(capsys, "explain", missing, "a fine film")
    refused(code, out, err, "which does not exist")


def test_every_line_of_a_file_gets_a_row_and_an_empty_file_is_named(
    capsys, tmp_path
):
    needs(os.path.join(SHIPPED, "imdb_micro"))
    four = tmp_path / "four.txt"
    four.write_text("great film\n\nawful\n  \n")
    code, out, err = cli(capsys, "predict", "imdb_micro", "--file", str(four))
    assert code == 0, err
    rows = out.splitlines()
    assert len(rows) == 4, out
    assert "no known word" in rows[1] and "no known word" in rows[3]
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, out, err = cli(capsys, "predict", "imdb_micro", "--file", str(empty))
    refused(code, out, err, f"--file={str(empty)!r}, and the file is empty")


def test_the_runtime_translates_a_list_of_sentences():
    from keras_attn_runtime import LiteRTTranslator

    needs(LITERT_TRANSLATOR)
    translator = LiteRTTranslator(LITERT_TRANSLATOR)
    one, two = "I am tired.", "We will go home."
    assert translator.translate([one, two]) == [
        translator.translate(one),
        translator.translate(two),
    ]
    with pytest.raises(ValueError, match="items of type"):
        translator.translate([one, 3])


@pytest.mark.parametrize(
    "args, needle",
    [
        (("imdb_micro", "imdb_edge", "--model-name", "x"), "for 2 models"),
        (("imdb_micro", "--model-name", "a/b"), "--model-name='a/b'"),
        (("imdb_micro", "--model-name", ""), "--model-name=''"),
        (("imdb_micro", "--max-streams", "0"), "--max-streams=0"),
    ],
)
def test_a_model_name_names_one_model_clients_can_route_to(
    args, needle, capsys
):
    pytest.importorskip("kserve")
    needs(os.path.join(SHIPPED, "imdb_micro"))
    code, out, err = cli(capsys, "serve", *args)
    refused(code, out, err, needle)


def test_ctrl_c_in_a_garbage_collector_callback_still_ends_the_command():
    # Python drops a KeyboardInterrupt raised in a gc callback, and JAX's
    # runs while TensorFlow loads: Ctrl-C at that moment let a long
    # translation run on to its end.
    import subprocess
    import textwrap

    script = textwrap.dedent(
        """
        import gc, os, signal, time
        from keras_attn_cli import harness

        def callback(phase, info):
            if phase == "start":
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # Python runs the handler here

        with harness.exit_on_interrupt():
            gc.callbacks.append(callback)
            gc.collect()
            gc.callbacks.remove(callback)
            print("ran on")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130, proc.stderr
    assert "ran on" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "keras-attn: interrupted"


@pytest.mark.slow
def test_ctrl_c_during_a_long_translation_ends_it_at_once(tmp_path):
    # A SavedModel's translation does not return to Python until it ends,
    # where the interrupt is raised: Ctrl-C took 9 s to act.
    import signal
    import subprocess
    import time

    if not os.path.isdir(os.path.join(SHIPPED, "translation_en_fr")):
        pytest.skip("no shipped translator")
    words = "the man child dog house car river tree book reads sees near old"
    words = words.split()
    lines = [
        " ".join(words[(i * 7 + k) % len(words)] for k in range(7)) + "."
        for i in range(3000)
    ]
    many = tmp_path / "many.txt"
    many.write_text("\n".join(lines))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_attn_cli",
            "translate",
            "--file",
            str(many),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(20)  # TensorFlow imported, the translator loaded, running
    assert proc.poll() is None, "the translation ended before Ctrl-C"
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "keras-attn: interrupted"
    assert took < 3, f"Ctrl-C took {took:.1f} s"
    # Interrupted in the middle, not after; what was finished was
    # printed as it finished, each line whole.
    done = [line for line in out.splitlines() if "  ->  " in line]
    assert len(done) < len(lines)
    for line in done:
        english, _, french = line.partition("  ->  ")
        assert english in lines and french.strip(), line


def test_translate_takes_the_model_first_as_explain_and_serve_do(capsys):
    # `translate translation_en_fr "I am tired."` translated the model's
    # name with the default translator, and exited 0.
    needs(os.path.join(SHIPPED, "translation_en_fr"))
    sentence = "I am tired."
    code, first, err = cli(capsys, "translate", LITERT_TRANSLATOR, sentence)
    assert code == 0, err
    code, flagged, err = cli(
        capsys, "translate", "--model", LITERT_TRANSLATOR, sentence
    )
    assert code == 0, err
    assert first == flagged
    translated = [line for line in first.splitlines() if "  ->  " in line]
    assert [line.split("  ->  ")[0] for line in translated] == [sentence]
    refused(*cli(capsys, "translate", "imdb_edge", "hi"), "translator")
