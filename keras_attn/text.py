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
