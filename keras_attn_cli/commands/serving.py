"""`keras-attn serve`: the flags checked and handed to
`keras_attn_cli.serving.serve`."""

import os


def serve(args):
    from keras_attn_cli.serving import http_routes, served
    from keras_attn_cli.serving import serve as server
    from keras_attn_cli.serving.limits import LIMITS

    _check_flags(args)
    sources, config = _model_sources(args)
    limits = {key: getattr(args, key) for key in LIMITS}
    batching = {key: getattr(args, key) for key in served.BATCHING}
    verify = None
    if args.require_signature is not None:
        from keras_attn_runtime.signing import Verifier

        verify = Verifier(args.require_signature, flag="--require-signature")
    return server.serve(
        sources,
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
        watching={
            "poll_s": args.file_system_poll_wait_seconds,
            "config": config
            and (config, args.model_config_file_poll_wait_seconds),
        },
        verify=verify,
        prefer=args.prefer,
    )


def _sources(args):
    """`{name: Source}` of the MODEL arguments (every shipped model,
    under its folder's name, when there is none)."""
    from keras_attn_cli import finding

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
    sources = [
        finding.served_source(v, root, args.model_versions) for v in values
    ]
    if args.model_name is not None:
        if len(sources) != 1:
            raise ValueError(
                "Expected one model with --model-name. Received: "
                f"--model-name={args.model_name!r} for {len(sources)} models"
            )
        finding.check_model_name(args.model_name)
        sources[0].name = args.model_name
    names = [source.name for source in sources]
    if len(set(names)) != len(names):
        raise ValueError(
            f"Two models would be served under one name. Received: {names}"
        )
    return {source.name: source for source in sources}


def _check_flags(args):
    """The numbers and ports `serve` takes, checked (a `ValueError`
    naming the flag)."""
    from keras_attn_cli.parser import POLL_FLAGS, SERVE_FLAGS

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
    for flag in POLL_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if not value >= 0:
            raise ValueError(
                f"Expected {flag} to be 0 or more. Received: {flag}={value}"
            )


def _model_sources(args):
    """`({name: Source}, read)`: the models of --model-config-file
    (`read()` reads it again) or of the MODEL arguments (`read` is
    `None`)."""
    from keras_attn_cli.serving import versions

    if args.model_config_file is not None:
        if args.model or args.model_name is not None:
            raise ValueError(
                "Expected the models in --model-config-file or as MODEL "
                "arguments, not both. Received: --model-config-file="
                f"{args.model_config_file!r} and MODEL={args.model}"
            )
        config_path = args.model_config_file

        def config():
            return versions.read_model_config(config_path)

        sources = config()
        if not sources:
            raise ValueError(
                "Expected --model-config-file to name at least one model. "
                f"Received: --model-config-file={config_path!r}"
            )
        return sources, config
    return _sources(args), None
