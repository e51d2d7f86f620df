"""`darknumba detector ...`: Darknet's detector sub-commands. Other modules add commands to
`detector_app` from their own `register`."""
import typer

detector_app = typer.Typer(rich_markup_mode=None, help="Darknet's detector commands: test, demo, train, map, recall, valid.",
                           no_args_is_help=True)


def register(app: typer.Typer):
    app.add_typer(detector_app, name="detector")
