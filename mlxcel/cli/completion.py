"""--completion-bash, as llama-server's: a bash completion script to `source`, for
`mlxcel serve` and `mlxcel-server` (every flag they implement; file names after the
flags that take a path) and for `mlxcel`'s commands."""

from __future__ import annotations

import argparse

from mlxcel.cli.serve_args import serve_parser

# what a flag's value is a path to: a file name completes after these
_PATH_WORDS = ("file", "model", "path", "dir", "mmproj", "lora", "control-vector", "log-prompts", "ssl-")


def _flags(parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """Every option string, and those whose value is a path."""
    flags, paths = [], []
    for action in parser._actions:  # argparse keeps no public list of its options
        flags.extend(action.option_strings)
        numeric = action.type in (int, float)
        if action.nargs != 0 and not numeric and any(word in s for s in action.option_strings for word in _PATH_WORDS):
            paths.extend(action.option_strings)
    return sorted(set(flags)), sorted(set(paths))


def bash_completion(prog: str = "mlxcel-server") -> str:
    from mlxcel.cli.main import _top_parser

    flags, paths = _flags(serve_parser(prog))
    commands = " ".join(sorted(_top_parser()[1].choices))
    return f"""# bash completion for mlxcel (source this file, or add it to ~/.bash_completion)
_mlxcel_serve_flags="{' '.join(flags)}"

_mlxcel_complete_serve() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    case "$prev" in
        {'|'.join(paths)})
            COMPREPLY=( $(compgen -f -- "$cur") )
            return 0 ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "$_mlxcel_serve_flags" -- "$cur") )
    else
        COMPREPLY=( $(compgen -f -- "$cur") )
    fi
}}

_mlxcel_complete() {{
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=( $(compgen -W "{commands}" -- "${{COMP_WORDS[1]}}") )
    elif [[ "${{COMP_WORDS[1]}}" == serve ]]; then
        _mlxcel_complete_serve
    fi
}}

complete -F _mlxcel_complete mlxcel
complete -F _mlxcel_complete_serve mlxcel-server
"""
