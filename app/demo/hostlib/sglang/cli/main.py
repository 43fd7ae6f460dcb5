"""The `sglang` console command: `sglang serve ...` and `sglang version`."""

import argparse
import os

import sglang


def main() -> None:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="subcommand", required=True)
    subparsers.add_parser("serve", help="Launch an SGLang server.", add_help=False)
    subparsers.add_parser("version", help="Show the version information.")
    args, extra_argv = parser.parse_known_args()
    if args.subcommand == "version":
        print(f"sglang version: {sglang.__version__}")
        return
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    server_args = prepare_server_args(extra_argv)
    try:
        launch_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
