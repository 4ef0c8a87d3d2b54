"""`keras-attn serve`: the flags checked and handed to
`keras_attn_cli.serving.serve`."""

import os


def serve(args):
    from keras_attn_cli import finding
    from keras_attn_cli.parser import SERVE_FLAGS
    from keras_attn_cli.serving import http_routes, served
    from keras_attn_cli.serving import serve as server
    from keras_attn_cli.serving.limits import LIMITS

    for flag, kind, _, _ in SERVE_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        # 0 turns gRPC off; with --max-queue, no request waits.
        off = flag in ("--grpc-port", "--max-queue") and value == 0
        off = off or value is None  # the model's own (--max-streams)
        if kind is not str and not off and not value > 0:
            raise ValueError(
                f"Expected {flag} to be positive. Received: {flag}={value}"
            )
    for flag in ("--port", "--grpc-port"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value > 65535:
            raise ValueError(
                f"Expected {flag} to be at most 65535. Received: {flag}={value}"
            )
    if args.grpc_port == args.port:
        raise ValueError(
            "Expected --grpc-port to differ from --port. Received: "
            f"--grpc-port={args.grpc_port}"
        )
    root = finding.models_dir(args)
    values = args.model
    if not values:
        if root is None:
            raise ValueError(finding.GET_MODELS)
        values = [
            name
            for name in sorted(os.listdir(root))
            if os.path.isdir(os.path.join(root, name))
        ]
    artifacts = [
        finding.served_versions(v, root, args.model_versions) for v in values
    ]
    if args.model_name is not None:
        if len(artifacts) != 1:
            raise ValueError(
                "Expected one model with --model-name. Received: "
                f"--model-name={args.model_name!r} for {len(artifacts)} models"
            )
        finding.check_model_name(args.model_name)
        artifacts = [(args.model_name, artifacts[0][1])]
    limits = {key: getattr(args, key) for key in LIMITS}
    batching = {key: getattr(args, key) for key in served.BATCHING}
    return server.serve(
        artifacts,
        args.host,
        args.port,
        args.allow_unsafe_ops,
        limits,
        batching,
        log=lambda line: print(f"keras-attn serve: {line}", flush=True),
        accelerator=args.accelerator,
        log_level=args.log_level,
        access={
            "token": http_routes.read_token(args.auth_token_file),
            "model_management": args.enable_model_management,
            "docs": args.enable_docs,
            "grpc_port": args.grpc_port,
        },
    )
