"""Small helpers shared by the manage.py commands of every app."""

import argparse


def int_between(low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``, with a readable error otherwise."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {number}")
        return number

    return parse
