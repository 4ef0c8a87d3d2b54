"""`keras-attn` as a new user (and an attacker) meets it.

Each case ended in a traceback, a silent wrong answer or a lost file on
the 0.1 command line. Most run in-process (`keras_attn_cli.main`); the
ones about start-up cost and log output run the real command.
"""

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import keras_attn_cli
from keras_attn import export
from keras_attn.export import saved_model
from tests.paths import ROOT

SHIPPED = os.path.join(ROOT, "saved_models")
TRANSLATOR = os.path.join(SHIPPED, "translation_en_fr")
IMDB = os.path.join(SHIPPED, "imdb_ssa")


def cli(capsys, *args, stdin=None, monkeypatch=None):
    if stdin is not None:
        import io

        monkeypatch.setattr(
            sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()))
        )
    code = keras_attn_cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, err, needle):
    assert code == 2, err
    assert err.startswith("keras-attn: error:"), err
    assert "Traceback" not in err
    assert needle in err, err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from tests.tiny_models import build_text_model

    folder = tmp_path_factory.mktemp("cli")
    model = build_text_model(encoder="attention")
    model.save(str(folder / "model.keras"))
    export.export_text_model(
        model,
        saved_model=str(folder / "sm"),
        tflite=str(folder / "model.tflite"),
    )
    return folder, model


def test_help_and_argument_errors_do_not_import_tensorflow():
    script = (
        "import sys, keras_attn_cli\n"
        "for argv in (['--help'], ['predict'], ['export', 'm', '--quantize',"
        " 'bad']):\n"
        "    try:\n"
        "        keras_attn_cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, 2), e.code\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.stdout.strip().splitlines()[-1] == "False False"


@pytest.mark.slow
def test_the_commands_own_output_is_the_only_output(files):
    folder, _ = files
    for artifact in (folder / "sm", folder / "model.tflite"):
        proc = subprocess.run(
            [sys.executable, "-m", "keras_attn_cli", "predict", str(artifact)]
            + ["great film"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == "", proc.stderr
        assert len(proc.stdout.strip().splitlines()) == 1


@pytest.mark.slow
def test_predict_reads_files_and_stdin(files, tmp_path, capsys, monkeypatch):
    folder, model = files
    long_text = "great film " * 30_000  # ~330 kB: too long for argv
    texts = ["awful plot", long_text]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    want = model.predict(np.array(texts, dtype=object), verbose=0)
    code, out, err = cli(
        capsys,
        "predict",
        str(folder / "model.tflite"),
        "--file",
        str(tmp_path / "in.txt"),
    )
    assert code == 0, err
    got = [float(line.split("\t")[0]) for line in out.splitlines()]
    np.testing.assert_allclose(got, want["probability"][:, 0], atol=1e-4)
    code, out2, err = cli(
        capsys,
        "predict",
        str(folder / "model.tflite"),
        "--file",
        "-",
        stdin="\n".join(texts),
        monkeypatch=monkeypatch,
    )
    assert code == 0 and out2 == out, err
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    code, _, err = cli(
        capsys,
        "predict",
        str(folder / "model.tflite"),
        "--file",
        str(tmp_path / "bin.txt"),
    )
    assert_clean_error(code, err, "--file=")


@pytest.mark.parametrize("artifact", ["model.keras", "sm", "model.tflite"])
def test_no_known_word_gets_no_verdict(files, capsys, artifact, tmp_path):
    folder, _ = files
    blank = tmp_path / "blank.txt"  # a file's blank lines are scored
    blank.write_text("\n   \ngreat film\n")
    code, out, err = cli(
        capsys,
        "predict",
        str(folder / artifact),
        "\U0001f600",
        "zzqqxx wwvvyy",  # unknown words only: 0.4828 from a SavedModel
        "--file",
        str(blank),
    )
    assert code == 0, err
    lines = out.splitlines()
    assert all("no known word" in line for line in lines[:4]), out
    assert "no known word" not in lines[4] and "..." not in lines[4]


@pytest.mark.slow
def test_wrong_model_for_the_command(files, capsys):
    folder, _ = files
    code, _, err = cli(
        capsys, "predict", os.path.join(TRANSLATOR, "saved_model"), "hi"
    )
    assert_clean_error(code, err, "keras-attn translate")
    code, _, err = cli(capsys, "translate", "--model", IMDB, "hi")
    assert_clean_error(code, err, "'translate' signature")
    code, _, err = cli(capsys, "align", str(folder / "sm"), "hi")
    assert_clean_error(code, err, "'translate' signature")


def test_empty_inputs(files, tmp_path, capsys):
    folder, _ = files
    code, _, err = cli(capsys, "translate", "--model", TRANSLATOR, "")
    assert_clean_error(code, err, "non-empty sentence")
    out_png = tmp_path / "a.png"
    code, _, err = cli(capsys, "align", TRANSLATOR, " ", "--out", str(out_png))
    assert_clean_error(code, err, "non-empty sentence")
    assert not out_png.exists()
    code, _, err = cli(capsys, "explain", str(folder / "model.keras"), "")
    assert_clean_error(code, err, "non-empty text. Received: text=''")
    for texts in ([""], ["fine", "  "]):
        code, out, err = cli(
            capsys, "predict", str(folder / "model.keras"), *texts
        )
        assert_clean_error(code, err, "non-empty text. Received: text")
        assert out == ""
    code, _, err = cli(
        capsys, "explain", str(folder / "model.keras"), "\U0001f600 zzqqxx"
    )
    assert_clean_error(code, err, "No known word")


@pytest.mark.slow
def test_align_out_never_replaces_a_users_file(tmp_path, capsys):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    code, _, err = cli(
        capsys, "align", TRANSLATOR, "I am tired.", "--out", str(mine)
    )
    assert_clean_error(code, err, "not a PNG")
    assert mine.read_text() == "mine"
    png = tmp_path / "a.png"
    assert cli(capsys, "align", TRANSLATOR, "Hi.", "--out", str(png))[0] == 0
    assert cli(capsys, "align", TRANSLATOR, "Hi.", "--out", str(png))[0] == 0


def test_explain_out_naming_a_file(files, tmp_path, capsys):
    folder, _ = files
    mine = tmp_path / "report"
    mine.write_text("mine")
    code, _, err = cli(
        capsys,
        "explain",
        str(folder / "model.keras"),
        "great film",
        "--out",
        str(mine),
    )
    assert_clean_error(code, err, "--out=")
    assert mine.read_text() == "mine"


def saved_module(path, fn, signature="serving_default"):
    import tensorflow as tf

    module = tf.Module()
    module.f = fn
    tf.saved_model.save(module, str(path), signatures={signature: fn})


def test_bad_saved_models(tmp_path, capsys):
    import tensorflow as tf

    string = tf.TensorSpec([None], tf.string)

    @tf.function(input_signature=[string])
    def no_probability(texts):
        return {"score": tf.zeros_like(texts, tf.float32)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def numbers(x):
        return {"probability": x}

    saved_module(tmp_path / "other_key", no_probability, "classify")
    saved_module(tmp_path / "no_prob", no_probability)
    saved_module(tmp_path / "numbers", numbers)
    saved_module(tmp_path / "no_vars", no_probability)
    import shutil

    shutil.rmtree(tmp_path / "no_vars" / "variables")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "saved_model.pb").write_bytes(b"\x0a\xff" * 50)
    cases = {
        "other_key": "'serving_default' signature",
        "no_prob": "returns 'probability'",
        "numbers": "one batch of strings",
        "no_vars": "variables.index",
        "corrupt": "Not a valid SavedModel",
    }
    for name, needle in cases.items():
        code, _, err = cli(capsys, "predict", str(tmp_path / name), "hi")
        assert_clean_error(code, err, needle)


def test_saved_models_that_touch_files_are_refused(tmp_path, capsys):
    import tensorflow as tf

    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    written = tmp_path / "pwned.txt"

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def evil(texts):
        tf.io.write_file(str(written), "x")
        leak = tf.io.read_file(str(secret))
        n = tf.cast(tf.strings.length(leak), tf.float32)
        return {"probability": tf.zeros_like(texts, tf.float32) + n}

    saved_module(tmp_path / "evil", evil)
    code, out, err = cli(capsys, "predict", str(tmp_path / "evil"), "hi")
    assert_clean_error(code, err, "allowed_ops (ReadFile, WriteFile)")
    assert not written.exists() and out == ""


def test_keras_files_load_in_safe_mode(tmp_path, capsys):
    import keras

    flag = str(tmp_path / "probe")
    # The path is a constant of the lambda's own code (what the file keeps).
    touch = eval(f"lambda x: (open({flag!r}, 'w').close(), x)[1]")
    assert (touch(1), os.path.exists(flag)) == (1, True)  # it would write
    inp = keras.Input((), dtype="string")
    out = keras.layers.Lambda(touch)(inp)
    keras.Model(inp, out).save(str(tmp_path / "lambda.keras"))
    if os.path.exists(flag):
        os.remove(flag)
    code, _, err = cli(capsys, "predict", str(tmp_path / "lambda.keras"), "x")
    assert_clean_error(code, err, "Could not load")
    assert not os.path.exists(flag)


def test_broken_keras_text_models(files, tmp_path, capsys):
    import keras

    folder, _ = files
    source = folder / "model.keras"
    stripped = tmp_path / "no_vocab.keras"
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(stripped, "w") as z:
        for item in zin.infolist():
            if not item.filename.startswith("assets/"):
                z.writestr(item, zin.read(item.filename))
    code, _, err = cli(capsys, "predict", str(stripped), "great film")
    assert code == 2 and "Traceback" not in err, err
    inp = keras.Input((), dtype="string")
    vec = keras.layers.TextVectorization(
        max_tokens=10, output_sequence_length=4
    )
    vec.adapt(np.array(["a b c"], dtype=object))
    tensor_out = (
        keras.layers.Lambda(lambda x: x)(vec(inp))
        if False
        else (keras.layers.Dense(1)(keras.ops.cast(vec(inp), "float32")))
    )
    keras.Model(inp, tensor_out).save(str(tmp_path / "tensor.keras"))
    code, _, err = cli(capsys, "predict", str(tmp_path / "tensor.keras"), "a")
    assert_clean_error(code, err, "dict with 'probability'")


def test_export_errors_name_the_flags_and_write_nothing(
    files, tmp_path, capsys, monkeypatch
):
    folder, _ = files
    model = str(folder / "model.keras")
    code, _, err = cli(
        capsys,
        "export",
        model,
        "--saved-model",
        str(tmp_path / "sm"),
        "--tflite",
        str(tmp_path / "m.tflite"),
        "--quantize",
        "int8",
    )
    assert_clean_error(code, err, "--calibration")
    code, _, err = cli(
        capsys,
        "export",
        model,
        "--tflite",
        str(tmp_path / "m.tflite"),
        "--calibration",
        str(tmp_path / "missing.txt"),
        "--quantize",
        "int8",
    )
    assert_clean_error(code, err, "--calibration=")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe")
    code, _, err = cli(
        capsys,
        "export",
        model,
        "--tflite",
        str(tmp_path / "m.tflite"),
        "--calibration",
        str(tmp_path / "binary.txt"),
        "--quantize",
        "int8",
    )
    assert_clean_error(code, err, "Received: --calibration=")
    (tmp_path / "binary.txt").unlink()
    code, _, err = cli(capsys, "export", model, "--saved-model", str(folder))
    assert_clean_error(code, err, "Refusing to replace")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saved_model, "write_saved_model", full_disk)
    code, _, err = cli(
        capsys, "export", model, "--saved-model", str(tmp_path / "sm")
    )
    assert_clean_error(code, err, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_single_string_predict_in_python(files):
    from keras_attn_runtime import LiteRTClassifier

    folder, _ = files
    clf = LiteRTClassifier(str(folder / "model.tflite"))
    one = clf.predict("great film")["probability"]
    listed = clf.predict(["great film"])["probability"]
    assert one.shape == (1, 1)
    np.testing.assert_array_equal(one, listed)


def test_models_are_found_by_contract_not_by_name(
    tmp_path, capsys, monkeypatch
):
    import shutil

    from keras_attn_cli import finding

    renamed = tmp_path / "models"
    renamed.mkdir()
    shutil.copytree(IMDB, renamed / "my_reviews_model")
    os.symlink(TRANSLATOR, renamed / "my_translator")
    monkeypatch.setenv("KERAS_ATTN_MODELS", str(renamed))
    assert finding.find_shipped_model() == str(
        renamed / "my_reviews_model" / "model.keras"
    )
    assert finding.find_translator() == str(
        renamed / "my_translator" / "saved_model"
    )
    monkeypatch.setenv("KERAS_ATTN_MODELS", str(tmp_path / "missing"))
    code, _, err = cli(capsys, "translate", "hi")
    assert_clean_error(code, err, "$KERAS_ATTN_MODELS=")


@pytest.mark.slow
def test_timeout_turns_a_model_that_never_finishes_into_an_error(tmp_path):
    import time

    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def endless(texts):
        (i,) = tf.while_loop(
            lambda i: tf.constant(True), lambda i: (i + 1,), [tf.constant(0)]
        )
        return {"probability": tf.zeros_like(texts, tf.float32) + float(i)}

    saved_module(tmp_path / "endless", endless)
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "keras_attn_cli", "--timeout", "15"]
        + ["predict", str(tmp_path / "endless"), "hi", "--allow-unsafe-ops"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 2, proc.stderr[-1000:]
    assert "--timeout=15 seconds" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.time() - start < 120


def test_models_never_come_from_the_working_directory(tmp_path, monkeypatch):
    # A downloaded folder holding ./saved_models chose the models that
    # `keras-attn` ran with no arguments (round three).
    from keras_attn_cli import finding

    (tmp_path / "saved_models" / "imdb_ssa").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERAS_ATTN_MODELS", raising=False)
    found = os.path.realpath(finding.models_dir())
    assert not found.startswith(os.path.realpath(str(tmp_path)))


def test_explain_keeps_a_users_page_and_replaces_its_own(
    files, tmp_path, capsys
):
    # 0.2.0 silently replaced any attention.html / attention.png in --out.
    folder, _ = files
    out = tmp_path / "report"
    out.mkdir()
    (out / "attention.html").write_text("my notes")
    args = ["explain", str(folder / "model.keras"), "great film"]
    code, _, err = cli(capsys, *args, "--out", str(out))
    assert_clean_error(code, err, "--overwrite")
    assert (out / "attention.html").read_text() == "my notes"
    assert not (out / "attention.png").exists()
    code, _, err = cli(capsys, *args, "--out", str(out), "--overwrite")
    assert code == 0, err
    first = (out / "attention.png").read_bytes()
    assert cli(capsys, *args, "--out", str(out))[0] == 0  # ours: replaced
    assert (out / "attention.png").read_bytes() == first
    assert "my notes" not in (out / "attention.html").read_text()
    assert sorted(os.listdir(out)) == ["attention.html", "attention.png"]


def test_long_inputs_stream_with_bounded_memory(tmp_path, monkeypatch):
    # 0.2.0 read all of standard input (`yes | keras-attn predict M
    # --file -` ran out of memory) and split a 99 MB line whole.
    import io
    import tracemalloc

    from keras_attn_cli import inputs

    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.write("é".encode() * (10 << 20))  # 20 MB, one line
        f.write(b"\nshort line\n")
    tracemalloc.start()
    lines = list(inputs.iter_text_lines(str(big), "--file"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * inputs.MAX_LINE_BYTES + (1 << 20), peak
    assert len(lines) == 2 and lines[1] == "short line"
    assert set(lines[0]) == {"é"}  # cut on a character boundary
    assert len(lines[0].encode()) <= inputs.MAX_LINE_BYTES

    from keras_attn_cli.commands import scoring

    chunks = []
    monkeypatch.setattr(
        scoring,
        "scorer",
        lambda path, args: (
            lambda texts: (
                chunks.append(len(texts)) or np.zeros(len(texts)),
                [1] * len(texts),
            )
        ),
    )
    monkeypatch.setattr(scoring, "resolve_model", lambda v, *a: v)
    stdin = io.TextIOWrapper(io.BytesIO(b"good film\n" * 600))
    monkeypatch.setattr(sys, "stdin", stdin)
    args = keras_attn_cli.build_parser().parse_args(
        ["predict", "m.keras", "--file", "-"]
    )
    assert scoring.predict(args) == 0
    assert sum(chunks) == 600 and max(chunks) <= inputs.CHUNK


@pytest.mark.parametrize(
    "folded",
    [
        pytest.param(True, id="folded"),
        # TensorFlow's allocator retries for 10 s before it gives up.
        pytest.param(False, id="runtime", marks=pytest.mark.slow),
    ],
)
def test_a_memory_failure_names_the_bytes_asked_for(folded):
    """A constant that graph optimization folded and could not hold was
    reported by its proto's last line, "float_val: 1"; an allocation the
    runtime refused, by its class. Both name the bytes asked for."""
    import tensorflow as tf

    from keras_attn_cli import loading

    @tf.function
    def fill(n):
        # Folding fails at once this far past memory (at 2**42 elements,
        # after 80 s of trying).
        shape = [2**31, 2**31] if folded else tf.stack([n, n, 4])
        return tf.reduce_sum(tf.fill(shape, 1.0))

    with pytest.raises(ValueError) as failed:
        loading.run_model(fill, tf.constant(2**29))
    message = str(failed.value)
    count = 2**62 if folded else 2**60
    assert message.startswith(
        f"The model failed to run: the model asked for {count * 4:,} bytes"
    )
    assert "float_val" not in message and "Fill" in message


@pytest.mark.slow
def test_text_models_on_another_backend_say_so(files):
    # With KERAS_BACKEND=jax, 0.2.0 said only "Invalid dtype: object".
    folder, _ = files
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attn_cli",
            "predict",
            str(folder / "model.keras"),
            "a fine film",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr
    assert "KERAS_BACKEND=tensorflow" in run.stderr


def test_verbose_anywhere_keeps_exit_2(files, capsys):
    # 0.2.0 took --verbose only before the command, and turned exit 2
    # into 1 (an uncaught traceback).
    folder, _ = files
    code, _, err = cli(
        capsys, "predict", str(folder / "missing.tflite"), "x", "--verbose"
    )
    assert code == 2 and "keras-attn: error:" in err


def test_a_missing_extra_is_named(files, capsys, monkeypatch):
    # 0.2.0 ended in `ModuleNotFoundError: ai_edge_litert` with no hint.
    folder, _ = files
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    code, _, err = cli(capsys, "predict", str(folder / "model.tflite"), "x")
    assert_clean_error(code, err, "pip install -e '.[export]'")


def test_one_way_to_name_a_model_for_every_command(files, capsys, tmp_path):
    # 0.2.0: `predict FOLDER` failed where `explain FOLDER` worked, and
    # `explain FOLDER/saved_model` failed.
    from keras_attn_cli import finding

    folder, _ = files
    keras_file = str(folder / "model.keras")
    resolve = finding.resolve_model
    assert resolve(str(folder), "artifact", "any") == keras_file
    assert resolve(str(folder / "sm"), "model", "keras") == keras_file
    assert resolve(str(folder / "sm"), "artifact", "any") == str(folder / "sm")
    code, out, err = cli(capsys, "predict", str(folder), "a great film")
    assert code == 0, err
    # `predict NAME` and `serve NAME` run the same file: the SavedModel
    # first, as TensorFlow Serving (0.3 ran the .keras for `predict`).
    from keras_attn_cli import finding as models
    from keras_attn_runtime import opener

    ssa = resolve("imdb_ssa", "artifact", "any")
    assert ssa.endswith("saved_model")
    root = models.models_dir()
    for name in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, name)):
            served = opener.find(models.served_artifact(name, root)[1])[1]
            assert os.path.abspath(resolve(name, "artifact", "any")) == served
    assert resolve("translation_en_fr", "model", "translator").endswith(
        "saved_model"
    )
    with pytest.raises(ValueError, match="model='nowhere'"):
        resolve("nowhere", "model", "keras")
    (tmp_path / "a.tflite").write_bytes(b"x")
    (tmp_path / "b.tflite").write_bytes(b"x")
    with pytest.raises(ValueError, match="artifact="):
        resolve(str(tmp_path), "artifact", "any")  # two: ambiguous


def test_docs_give_the_model_search_order_the_code_uses(tmp_path, monkeypatch):
    """docs/export.md's order of model folders is `models_dir`'s."""
    import re
    from types import SimpleNamespace

    from keras_attn_cli import finding as models

    with open(os.path.join(ROOT, "docs", "export.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    sentence = re.search(r"Models are looked up in (.*?);", text).group(1)
    names = [
        "--models DIR",
        "$KERAS_ATTN_MODELS",
        "saved_models/",
        "keras-attn-models",
    ]
    places = [sentence.index(f"`{n}`") for n in names]
    assert places == sorted(places), sentence
    flag, env = tmp_path / "flag", tmp_path / "env"
    flag.mkdir(), env.mkdir()
    monkeypatch.setenv("KERAS_ATTN_MODELS", str(env))
    assert models.models_dir(SimpleNamespace(models=str(flag))) == str(flag)
    assert models.models_dir(SimpleNamespace(models=None)) == str(env)
    monkeypatch.delenv("KERAS_ATTN_MODELS")
    monkeypatch.chdir(tmp_path)  # a ./saved_models here is never read
    (tmp_path / "saved_models").mkdir()
    checkout = os.path.realpath(os.path.join(ROOT, "saved_models"))
    found = models.models_dir(SimpleNamespace(models=None))
    assert os.path.realpath(found) == checkout


def test_accelerator_flag_runs_or_names_the_missing_device(files, capsys):
    folder, _ = files
    tflite = str(folder / "model.tflite")
    code, out, err = cli(
        capsys, "--accelerator", "cpu", "predict", tflite, "good"
    )
    assert code == 0 and len(out.strip().splitlines()) == 1, err
    code, out, err = cli(
        capsys, "--accelerator", "gpu", "predict", tflite, "good"
    )
    if code != 0:  # no GPU that LiteRT can use here
        assert_clean_error(code, err, "accelerator='gpu'")
    with pytest.raises(SystemExit) as exit_:
        keras_attn_cli.main(["--accelerator", "tpu", "predict", tflite, "x"])
    assert exit_.value.code == 2
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_an_onnx_classifier_is_served_and_predicted_alike(tmp_path):
    """`keras-attn predict`'s scorer and the served artifact give the
    same probabilities for an ONNX file."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import types

    from keras_attn_cli.serving.served import load_backend
    from tests.tiny_models import tiny_onnx_classifier

    path = tiny_onnx_classifier(str(tmp_path / "m.onnx"))
    texts = ["good film", "bad", "film film good"]
    out = load_backend(path).run(
        "serving_default", {"text": [t.encode() for t in texts]}
    )
    args = types.SimpleNamespace(
        accelerator="cpu", vocabulary=None, allow_unsafe_ops=False
    )
    from keras_attn_cli.commands.scoring import scorer

    probs, known = scorer(path, args)(texts)
    np.testing.assert_array_equal(probs, out["probability"][:, 0])
    assert known == [2, 0, 3]


def test_predict_on_a_decoder_only_folder_points_to_translate(capsys):
    # The folder opens as its bundle, which `predict` cannot score: the
    # refusal names it and the commands that can use it.
    code, _, err = cli(capsys, "predict", "translation_en_fr_lm", "Hi.")
    assert_clean_error(code, err, "keras-attn translate --model")
    assert "model.litertlm" in err
