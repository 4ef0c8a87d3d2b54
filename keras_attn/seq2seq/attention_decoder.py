"""`AttentionDecoder`: any Keras RNN cell with attention over a memory."""

import keras
from keras import layers, ops

from keras_attn.seq2seq import _decoder_sequence as sequence
from keras_attn.seq2seq._mechanisms import (
    attend_one,
    check_arguments,
    each,
    mechanism_list,
    memory_shapes,
    one_mechanism,
    output_size,
    output_spec,
)
from keras_attn.seq2seq.monotonic import initial_alignment
from keras_attn.validation import clone_initializer


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionDecoder(layers.Layer):
    """A recurrent decoder that attends over an encoder memory at each step.

    Wraps a Keras RNN cell (`GRUCell`, `LSTMCell`, ...) with one of our
    attention scores over `memory` `(B, S, D)`, the maintained Keras 3
    counterpart of `tfa.seq2seq.AttentionWrapper`. With `s_t` the cell
    output and `a_t = Σ_j α_tj h_j` the context (Luong et al.
    2015, Bahdanau et al. 2015):

    - `attention_order="luong"`: step first, then attend with the new
      state: `s_t = cell(x_t, s_{t-1})`, `α_t = softmax(score(s_t, h))`.
    - `attention_order="bahdanau"`: attend with the previous state, then
      step on the context: `α_t = softmax(score(s_{t-1}, h))`,
      `s_t = cell([x_t; a_t], s_{t-1})`.

    The output is Luong's attentional state `s̃_t = tanh(W_c [a_t; s_t] +
    b_c)` when `attentional_units` is set, else `[a_t; s_t]`.
    tfa's `AttentionWrapper(attention_layer_size=n)` computes a bias-free
    linear `W [s_t; a_t]` instead: `attentional_activation=None,
    attentional_use_bias=False` (its kernel is ours with the two row
    blocks swapped); `attention_layer` takes any Keras layer for that
    role, as tfa's `attention_layer=`. With
    `input_feeding=True` the previous output is concatenated to the next
    input, `x'_t = [x_t; s̃_{t-1}]` (zeros at `t = 0`).

    One layer serves both uses: `call` runs teacher forcing over a whole
    target sequence (the loop is a `keras.ops.scan`; in Luong order
    without input feeding the cell runs first and attention is one batched
    call), and `step` decodes one token for search; both give the same
    numbers.

    Args:
        cell: a Keras RNN cell instance (its `dropout` and
            `recurrent_dropout` must be 0; put dropout around the decoder).
        score: the attention score, as in `keras_attn.Attention`: one of
            `"dot"`, `"scaled_dot"`, `"general"`, `"low_rank"`,
            `"additive"`. Defaults to `"additive"`.
        units: hidden width of the additive score. Defaults to `None`
            (the cell's output size).
        rank: `k` of the low-rank score. Defaults to `None`.
        attention_order: `"luong"` or `"bahdanau"`. Defaults to `"luong"`.
        attentional_units: width of `s̃_t` (`W_c`); `None` outputs
            `[a_t; s_t]`. Defaults to `None`.
        attentional_activation: the activation of `s̃_t`. Defaults to
            `"tanh"`.
        attentional_use_bias: whether `W_c` has a bias `b_c`. Defaults
            to `True`.
        attention_layer: a Keras layer applied to `[a_t; s_t]` instead
            of `W_c` (not with `attentional_units`). Defaults to `None`.
        use_scale: Luong's scaled score (a learned scalar on the scores,
            tfa's `LuongAttention(scale=True)`). Defaults to `False`.
        normalize: weight-normalized additive score (tfa's
            `BahdanauAttention(normalize=True)`). Defaults to `False`.
        attention_use_bias: whether the additive score has its bias `b`
            (tfa's `BahdanauAttention` has one only with `normalize`).
            Defaults to `True`.
        input_feeding: concatenate the previous output to the next input.
            Defaults to `False`.
        monotonic: `None` (softmax attention) or a mode of monotonic
            attention, `"parallel"`, `"recursive"` or `"hard"` (Raffel
            et al. 2017; tfa's `BahdanauMonotonicAttention` with
            `score="additive"`, `LuongMonotonicAttention` with `"dot"` or
            `"general"`; see `MonotonicAttention`). The states then end
            with the previous alignment. Defaults to `None`.
        sigmoid_noise: monotonic attention's pre-sigmoid noise while
            training. Defaults to `0.0`.
        score_bias_init: monotonic attention's initial score bias `r`.
            Defaults to `0.0`.
        mechanisms: several attention mechanisms, as tfa's list: a list
            of `keras_attn.Attention` layers, one per memory (`memory`
            and `memory_mask` are then lists in the same order); their
            contexts are concatenated in that order and the alignments
            come back as a list. The score arguments above then do not
            apply. Defaults to `None` (one mechanism, built from them).
        dropout: dropout on the attention weights. Defaults to `0.0`.
        kernel_initializer: initializer of the attention and `W_c`
            kernels. Defaults to `"glorot_uniform"`.
        seed: seed of the attention dropout. Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(B, T, E)` target-side inputs (embedded previous tokens).
        memory: `(B, S, D)` encoder states.
        initial_state: optional list of the cell's states (as
            `cell.get_initial_state`), e.g. from the encoder. Defaults to
            zeros.
        inputs_mask: optional boolean `(B, T)`: padded steps leave the
            states unchanged and give zero outputs and alignments. Read
            from the Keras mask of `inputs` when not given.
        memory_mask: optional boolean `(B, S)`: padded memory positions get
            attention exactly 0. Read from the Keras mask of `memory`.
        training: whether dropout is active.

    Returns:
        `(outputs (B, T, O), alignments (B, T, S), states)`: `states` is
        the list to pass to `step` to continue (the cell's states, then the
        previous output when `input_feeding`, then the last alignment with
        `monotonic`).

    Example:

    >>> import numpy as np
    >>> decoder = AttentionDecoder(keras.layers.GRUCell(8), units=8)
    >>> out, align, states = decoder(np.ones((2, 5, 4)), np.ones((2, 3, 6)))
    >>> tuple(out.shape), tuple(align.shape)
    ((2, 5, 14), (2, 5, 3))

    References:
        - [Luong et al. 2015](https://arxiv.org/abs/1508.04025)
        - [Bahdanau et al. 2015](https://arxiv.org/abs/1409.0473)
    """

    def __init__(
        self,
        cell,
        score="additive",
        units=None,
        rank=None,
        attention_order="luong",
        attentional_units=None,
        input_feeding=False,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        seed=None,
        attentional_activation="tanh",
        attentional_use_bias=True,
        attention_layer=None,
        use_scale=False,
        normalize=False,
        attention_use_bias=True,
        monotonic=None,
        sigmoid_noise=0.0,
        score_bias_init=0.0,
        mechanisms=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        cell, attention_layer = check_arguments(
            cell, attention_order, attentional_units, attention_layer
        )
        self.cell = cell
        self.score = score
        self.units = units
        self.rank = rank
        self.attention_order = attention_order
        self.attentional_units = attentional_units
        self.input_feeding = input_feeding
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.seed = seed
        cell_units = cell.output_size
        options = {
            "score": score,
            "units": (units or cell_units) if score == "additive" else units,
            "rank": rank,
            "dropout": dropout,
            "kernel_initializer": kernel_initializer,
            "seed": seed,
            "use_scale": use_scale,
            "normalize": normalize,
            "use_bias": attention_use_bias,
            "dtype": self.dtype_policy,
            "name": "attention",
        }
        self.monotonic = monotonic
        self.sigmoid_noise, self.score_bias_init = (
            sigmoid_noise,
            score_bias_init,
        )
        self.mechanisms = mechanism_list(mechanisms, monotonic)
        self.attention = one_mechanism(
            options, self.mechanisms, monotonic, sigmoid_noise, score_bias_init
        )
        self.attentional_activation = keras.activations.get(
            attentional_activation
        )
        self.attentional_use_bias = attentional_use_bias
        self.use_scale, self.normalize = use_scale, normalize
        self.attention_use_bias = attention_use_bias
        self.attentional_layer = attention_layer
        self._own_attention_layer = attention_layer is None
        if attentional_units:
            self.attentional_layer = layers.Dense(
                attentional_units,
                activation=self.attentional_activation,
                use_bias=attentional_use_bias,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name="attentional",
            )
        self.supports_masking = True

    @property
    def _cell_states(self):
        size = self.cell.state_size
        return len(size) if isinstance(size, (list, tuple)) else 1

    def build(self, inputs_shape, memory_shape):
        shapes = memory_shapes(memory_shape, self.mechanisms)
        cell_units = self.cell.output_size
        width = sum(shape[-1] for shape in shapes)
        self.output_size = output_size(
            self.attentional_units, self.attentional_layer, width + cell_units
        )
        cell_in = inputs_shape[-1]
        cell_in += self.output_size if self.input_feeding else 0
        cell_in += width if self.attention_order == "bahdanau" else 0
        if not self.cell.built:  # a deserialized cell comes built
            self.cell.build((None, cell_in))
        if self.mechanisms is not None:
            for mechanism, shape in zip(self.mechanisms, shapes, strict=True):
                if not mechanism.built:
                    mechanism.build((None, 1, cell_units), tuple(shape))
        elif self.monotonic is None:
            self.attention.build((None, 1, cell_units), tuple(memory_shape))
        else:
            self.attention.build((None, cell_units), tuple(memory_shape))
        if self.attentional_layer is not None and (
            not self.attentional_layer.built
        ):
            self.attentional_layer.build((None, width + cell_units))
        self.built = True

    def get_initial_state(self, batch_size, memory_length=None):
        """Zero states for `step`: the cell's, then the fed-back output,
        then (monotonic attention, given `memory_length`) the previous
        alignment `[1, 0, ..., 0]`."""
        states = self.cell.get_initial_state(batch_size)
        states = list(states) if isinstance(states, (list, tuple)) else [states]
        if self.input_feeding:
            states.append(
                ops.zeros((batch_size, self.output_size), self.compute_dtype)
            )
        if self.monotonic is not None and memory_length is not None:
            states.append(
                initial_alignment(batch_size, memory_length, self.compute_dtype)
            )
        return states

    def full_states(self, batch_size, initial_state, memory):
        """The decoder's whole state list from a user's `initial_state`
        (the cell's states; `None`: zeros): the input-feeding vector and
        the monotonic alignment appended where the user gave none."""
        memory_length = None
        if self.monotonic is not None:
            memory_length = ops.shape(memory)[1]
        if initial_state is None:
            return self.get_initial_state(batch_size, memory_length)
        states = initial_state
        states = list(states) if isinstance(states, (list, tuple)) else [states]
        if self.input_feeding and len(states) == self._cell_states:
            states.append(
                ops.zeros((batch_size, self.output_size), self.compute_dtype)
            )
        monotonic = self.monotonic is not None
        if monotonic and len(states) == self._cell_states + self.input_feeding:
            states.append(
                initial_alignment(batch_size, memory_length, self.compute_dtype)
            )
        expected = self._cell_states + int(self.input_feeding) + monotonic
        if len(states) != expected:
            fed = ", then the fed-back output" if self.input_feeding else ""
            fed += ", then the previous alignment" if monotonic else ""
            raise ValueError(
                f"Expected initial_state to hold {expected} tensors (the "
                f"cell's states{fed}). Received: {len(states)} tensors"
            )
        return [ops.cast(s, self.compute_dtype) for s in states]

    def memory_keys(self, memory, memory_mask=None):
        """The memory's keys as the score reads them
        (`keras_attn.Attention.project_key`), for `step`'s `keys`: the
        key projection (`"low_rank"`, `"additive"`) then runs once a
        sequence instead of once a step, with the same numbers. `None`
        where the score does not project its keys (or with `monotonic`);
        with `mechanisms`, a list, one a mechanism (`None` in place)."""
        if self.mechanisms is not None:
            masks = memory_mask or [None] * len(memory)
            return [
                m.project_key(h, k)
                for m, h, k in zip(self.mechanisms, memory, masks, strict=True)
            ]
        if self.monotonic is not None:
            return None
        return self.attention.project_key(memory, memory_mask)

    def _attend(
        self, query, memory, memory_mask, training, previous=None, keys=None
    ):
        if self.mechanisms is not None:  # contexts concatenated
            masks = memory_mask or [None] * len(memory)
            keys = keys or [None] * len(memory)
            pairs = [
                attend_one(m, query, h, k, training, projected)
                for m, h, k, projected in zip(
                    self.mechanisms, memory, masks, keys, strict=True
                )
            ]
            context = ops.concatenate([c for c, _ in pairs], axis=-1)
            return context, [w for _, w in pairs]
        if self.monotonic is not None:
            return self.attention(
                query,
                memory,
                previous,
                memory_mask=memory_mask,
                training=training,
            )
        return attend_one(
            self.attention, query, memory, memory_mask, training, keys
        )

    def _output(self, context, cell_out):
        joined = ops.concatenate([context, cell_out], axis=-1)  # (B, D + U)
        if self.attentional_layer is None:
            return joined
        return self.attentional_layer(joined)

    def step(
        self,
        inputs,
        states,
        memory,
        memory_mask=None,
        training=None,
        keys=None,
    ):
        """One decoding step.

        Args:
            inputs: `(B, E)`, the embedded previous token.
            states: the list from `get_initial_state`, `call` or `step`,
                or only the cell's states (the fed-back output then starts
                at zeros).
            memory: as in `call`.
            memory_mask: as in `call`.
            keys: optional, `memory_keys(memory, memory_mask)` computed
                once for every step of a sequence (kept in a search's
                state beside the memory).

        Returns:
            `(output (B, O), new_states, alignment (B, S))`.
        """
        # A new tensor: a padding mask on one step's embedding (from
        # `Embedding(mask_zero=True)`) means nothing to the cell, which
        # would warn that it "destroys" it.
        if keys is not None and self.monotonic is not None:
            raise ValueError(
                "Expected no keys with monotonic attention (`memory_keys` "
                f"gives None). Received: keys with monotonic="
                f"{self.monotonic!r}"
            )
        inputs = ops.copy(ops.cast(inputs, self.compute_dtype))
        memory = each(lambda m: ops.cast(m, self.compute_dtype), memory)
        states = self.full_states(ops.shape(inputs)[0], states, memory)
        n = self._cell_states
        previous = states[-1] if self.monotonic is not None else None
        cell_states = list(states[:n])
        pieces = [inputs]
        if self.input_feeding:
            pieces.append(states[n])
        if self.attention_order == "bahdanau":
            context, weights = self._attend(
                cell_states[0], memory, memory_mask, training, previous, keys
            )
            pieces.append(context)
        cell_in = (
            ops.concatenate(pieces, axis=-1) if len(pieces) > 1 else inputs
        )
        cell_state = cell_states if n > 1 else cell_states[0]
        cell_out, new_cell = self.cell(cell_in, cell_state, training=training)
        new_cell = (
            list(new_cell)
            if isinstance(new_cell, (list, tuple))
            else [new_cell]
        )
        if self.attention_order == "luong":
            context, weights = self._attend(
                cell_out, memory, memory_mask, training, previous, keys
            )
        output = self._output(context, cell_out)
        new_states = new_cell + ([output] if self.input_feeding else [])
        if self.monotonic is not None:
            new_states.append(weights)
        return output, new_states, weights

    def call(
        self,
        inputs,
        memory,
        initial_state=None,
        inputs_mask=None,
        memory_mask=None,
        training=None,
    ):
        return sequence.decode(
            self,
            inputs,
            memory,
            initial_state,
            inputs_mask,
            memory_mask,
            training,
        )

    def compute_mask(self, inputs, previous_mask=None):
        # Keras passes the mask of `inputs` (the target side): it masks the
        # outputs and the alignments; the states have none.
        n = self._cell_states + int(self.input_feeding)
        n += int(self.monotonic is not None)
        aligned = previous_mask
        if self.mechanisms is not None:
            aligned = [previous_mask] * len(self.mechanisms)
        return [previous_mask, aligned] + [None] * n

    def compute_output_spec(self, inputs, memory, initial_state=None, **kw):
        return output_spec(self, inputs, memory)

    def get_config(self):
        return {
            **super().get_config(),
            "cell": layers.serialize(self.cell),
            "score": self.score,
            "units": self.units,
            "rank": self.rank,
            "attention_order": self.attention_order,
            "attentional_units": self.attentional_units,
            "input_feeding": self.input_feeding,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "seed": self.seed,
            "attentional_activation": keras.activations.serialize(
                self.attentional_activation
            ),
            "attentional_use_bias": self.attentional_use_bias,
            "attention_layer": None
            if self._own_attention_layer
            else layers.serialize(self.attentional_layer),
            "use_scale": self.use_scale,
            "normalize": self.normalize,
            "attention_use_bias": self.attention_use_bias,
            "monotonic": self.monotonic,
            "sigmoid_noise": self.sigmoid_noise,
            "score_bias_init": self.score_bias_init,
            "mechanisms": None
            if self.mechanisms is None
            else [layers.serialize(m) for m in self.mechanisms],
        }
