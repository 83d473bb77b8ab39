"""One module per `rlsim` subcommand (face layer): parse, call the layers below, print."""
