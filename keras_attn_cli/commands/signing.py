"""`keras-attn sign` and `keras-attn verify`: a model's signature
written and checked (`keras_attn_runtime.signing`)."""


def sign(args):
    from keras_attn_runtime.signing import sign as write

    if args.certificate_chain and args.certificate is None:
        raise ValueError(
            "Expected --certificate with --certificate-chain. Received: "
            f"--certificate-chain={' '.join(args.certificate_chain)}"
        )
    target = write(
        args.model,
        args.private_key,
        certificate=args.certificate,
        certificate_chain=args.certificate_chain,
        overwrite=args.overwrite,
    )
    print(f"signed {args.model}: {target}")
    return 0


def verify(args):
    from keras_attn_runtime.signing import Verifier

    check = Verifier(args.require_signature, flag="--require-signature")
    check(args.model)
    print(f"verified {args.model}: signed by {args.require_signature}")
    return 0
