"""The judgeflow command line."""

import typer

app = typer.Typer(help="judgeflow: LLM-as-a-judge scoring of production traces.", no_args_is_help=True)


@app.command()
def version() -> None:
    """Print judgeflow's version."""
    from judgeflow import __version__

    typer.echo(__version__)
