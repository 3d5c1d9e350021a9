"""The `cdmpp` command: one thin subcommand per stage of the data flow."""

from __future__ import annotations

import argparse
import os
import sys

from cdmpp.cli import (calibrate_cmd, collect_cmd, db_cmd, e2e_cmd, env_cmd, features_cmd,
                       predict_cmd, train_cmd, tune_cmd)

SUBCOMMANDS = (env_cmd, collect_cmd, db_cmd, features_cmd, train_cmd, predict_cmd, e2e_cmd,
               calibrate_cmd, tune_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdmpp", description="Predict the latency of tensor programs and whole networks.")
    from cdmpp import __version__

    parser.add_argument("--version", action="version", version=f"cdmpp {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    import warnings

    args = build_parser().parse_args(argv)
    # cdmpp's own warnings (bad lines left out, ...) as one line each, not with a source line
    default_format = warnings.formatwarning

    def one_line(message, category, filename, lineno, line=None):
        if f"{os.sep}cdmpp{os.sep}" not in str(filename):  # a library's: as Python shows it
            return default_format(message, category, filename, lineno, line)
        return f"cdmpp {args.command}: warning: {message}\n"

    warnings.formatwarning = one_line
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # the reader went away (`cdmpp db ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose pipe was closed
    except KeyboardInterrupt:
        resumable = args.command in ("collect", "features", "train", "calibrate")
        print("interrupted" + (": run the same command again to go on" if resumable else ""),
              file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError, IsADirectoryError, NotADirectoryError,
            PermissionError, FileExistsError) as e:
        # user-facing errors (bad input, a path that is a directory or not writable, device
        # mismatch) end with one clear line, no traceback
        print(f"cdmpp {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
