"""The sampling parameters, named once: what each means, its type and its
range. The Keras sampler settings (`keras_attn.models.Sampling`), the
runtime's sampler (`keras_attn_runtime.generator.chooser`), OpenAI's
request parser and the server's OpenAPI document all read `PARAMETERS`,
so a range is written in one place and they cannot drift.

`check(name, value)` returns a value within its range or raises a
`ValueError` naming it; `schema(name)` is its JSON schema.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One sampling parameter: `kind` (`int` or `float`), its bounds
    (`None`: unbounded; `exclusive` makes the lower one strict), its
    default and what it means."""

    name: str
    kind: type
    minimum: float = None
    maximum: float = None
    exclusive: bool = False
    default: object = None
    meaning: str = ""

    def range_text(self):
        noun = "integer" if self.kind is int else "number"
        if self.maximum is None:
            if self.minimum is None:
                return f"an {noun}" if self.kind is int else f"a {noun}"
            if (self.minimum, self.exclusive) in ((0, True), (1, False)):
                return f"a positive {noun}"
            sign = ">" if self.exclusive else ">="
            return f"a {noun} {sign} {self.minimum}"
        left = "(" if self.exclusive else "["
        low = "-∞" if self.minimum is None else self.minimum
        return f"in {left}{low}, {self.maximum}]"


PARAMETERS = {
    p.name: p
    for p in (
        Parameter(
            "temperature",
            float,
            minimum=0,
            exclusive=True,
            default=1.0,
            meaning="divides the logits before the softmax",
        ),
        Parameter(
            "top_k",
            int,
            minimum=1,
            default=None,
            meaning="keep only the k most likely tokens (None: all)",
        ),
        Parameter(
            "top_p",
            float,
            minimum=0,
            maximum=1,
            exclusive=True,
            default=1.0,
            meaning="keep the most likely tokens until their probability "
            "sums to p (the nucleus)",
        ),
        Parameter(
            "seed",
            int,
            default=None,
            meaning="the seed of the uniform numbers (None: fresh entropy)",
        ),
    )
}


def check(name, value, allow_none=None):
    """`value` of parameter `name` as its kind, or a `ValueError` naming
    `name` and the value: of the parameter's type (a bool is not a
    number) and within its range. `None` passes where the parameter's
    default is `None` (or `allow_none`)."""
    parameter = PARAMETERS[name]
    if allow_none is None:
        allow_none = parameter.default is None
    if value is None and allow_none:
        return None
    kinds = (int,) if parameter.kind is int else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    if ok and parameter.minimum is not None:
        low = parameter.minimum
        ok = value > low if parameter.exclusive else value >= low
    if ok and parameter.maximum is not None:
        ok = value <= parameter.maximum
    if not ok:
        also = " or None" if allow_none else ""
        raise ValueError(
            f"Expected {name} to be {parameter.range_text()}{also}. "
            f"Received: {name}={value!r}"
        )
    return parameter.kind(value)


def read(settings):
    """`settings` (`{"temperature", "top_k", "top_p", "seed"}`, any left
    out at their defaults) checked, as the samplers take them."""
    unknown = set(settings) - set(PARAMETERS)
    if unknown:
        raise ValueError(
            f"Expected sampling settings among {sorted(PARAMETERS)}. "
            f"Received: {sorted(unknown)}"
        )
    return {
        name: check(name, settings.get(name, parameter.default))
        for name, parameter in PARAMETERS.items()
    }


def schema(name, **extra):
    """Parameter `name`'s JSON schema (`extra` widens or narrows it for
    one protocol, as OpenAI's `temperature` of 0 asking for no
    sampling)."""
    parameter = PARAMETERS[name]
    out = {"type": "integer" if parameter.kind is int else "number"}
    if parameter.minimum is not None:
        key = "exclusiveMinimum" if parameter.exclusive else "minimum"
        out[key] = parameter.minimum
    if parameter.maximum is not None:
        out["maximum"] = parameter.maximum
    out.update(extra)
    return {k: v for k, v in out.items() if v is not None}
