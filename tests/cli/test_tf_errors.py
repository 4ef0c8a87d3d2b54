"""`keras_attn_cli.tf_errors`: a TensorFlow error in one line that says
what went wrong, an allocation that does not fit with its size."""

import pytest

from keras_attn_cli import tf_errors


def test_tensorflow_errors_say_what_went_wrong():
    message = (
        "Graph execution error:\n\nDetected at node model/dense defined at "
        '(most recent call last):\n  File "x.py", line 3\n\nOOM when '
        "allocating tensor with shape[1000000,1000000] and type float\n\t "
        "[[{{node x}}]]"
    )
    line = tf_errors.op_error_line(message)
    assert line == (
        f"the model asked for {10**12 * 4:,} bytes (a float tensor of "
        "shape [1000000, 1000000], node x): more memory than can be "
        "allocated"
    )


def test_a_shape_over_the_limit_is_named_not_only_its_node():
    # 0.3.0 reported only "[[{{node Fill}}]]": the line after the cause.
    import tensorflow as tf

    @tf.function
    def fill(n):
        return tf.fill(tf.stack([n, n, n]), 1.0)  # (n, n, n)

    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        fill(tf.constant(2**30))
    line = tf_errors.op_error_line(caught.value.message)
    assert "Shape [1073741824,1073741824,1073741824]" in line
    assert "2**63 - 1 elements" in line and line.endswith("(at node Fill)")
