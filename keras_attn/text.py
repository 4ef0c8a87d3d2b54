"""Text standardization used by the example models' `TextVectorization`.

Registered so that `.keras` files holding a `TextVectorization` layer with
this function reload with a plain `keras.models.load_model` (after
`import keras_attn`). Text preprocessing runs outside the attention layers,
so it uses `tf.strings` (as `TextVectorization` itself does).
"""

import keras


@keras.saving.register_keras_serializable(package="keras_attn")
def standardize_review(text):
    """Lowercase, drop HTML tags such as `<br />`, keep `!`/`?` as tokens.

    Other punctuation becomes a space; apostrophes inside words are kept
    (`don't`).
    """
    import tensorflow as tf

    text = tf.strings.lower(text)
    text = tf.strings.regex_replace(text, r"<[^>]*>", " ")
    text = tf.strings.regex_replace(text, r"([!?])", r" \1 ")
    text = tf.strings.regex_replace(text, r"[^a-z0-9!?' ]", " ")
    text = tf.strings.regex_replace(text, r"(^|\s)'+|'+(\s|$)", " ")
    return text


_SPACES = "\u202f\u00a0\u2009"


def _split_punctuation(text):
    import tensorflow as tf

    text = tf.strings.regex_replace(text, f"[{_SPACES}]", " ")
    text = tf.strings.regex_replace(text, r"([.,!?;:\"«»()])", r" \1 ")
    text = tf.strings.regex_replace(text, r"'", r"' ")
    text = tf.strings.regex_replace(text, r"[\t\n\f\r ]+", " ")
    return tf.strings.strip(text)


@keras.saving.register_keras_serializable(package="keras_attn")
def split_sentence(text):
    """For cased translation: `standardize_sentence` without lowercasing.

    `"Tom's 3 cats!"` → `"Tom' s 3 cats !"`.
    """
    return _split_punctuation(text)


@keras.saving.register_keras_serializable(package="keras_attn")
def standardize_sentence(text):
    """For translation: lowercase, split off punctuation, unify spaces.

    Narrow and non-breaking spaces (U+202F, U+00A0, U+2009, used before
    `! ? :` in French) become plain spaces; `. , ! ? ; : " « »` become
    their own tokens; an apostrophe stays attached to the word before it
    (`l'` `homme`, `don't`). Lowercases only ASCII letters, as
    `tf.strings.lower` does.
    """
    import tensorflow as tf

    return _split_punctuation(tf.strings.lower(text, encoding="utf-8"))
