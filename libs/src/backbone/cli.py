"""What every operator command line does before it acts: refuse card data (DESIGN §9).

An operator's ``--reason``, a file to import or a reference typed by hand is stored and read by many
people; a card number in any of them is refused with a one-line JSON error on stderr that names no
value, and the command exits 2 having changed nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from backbone.carddata import CARD_DATA_CODE, CARD_DATA_MESSAGE, find_card_number, find_in_body


def refuse_card_data(arguments: Iterable[str], files: Iterable[bytes] = ()) -> bool:
    """True (after writing the error) if an argument or a file's content carries card data."""
    if not any(find_card_number(arg) for arg in arguments) and not any(find_in_body(f) for f in files):
        return False
    print(json.dumps({"error": {"code": CARD_DATA_CODE, "message": CARD_DATA_MESSAGE}}), file=sys.stderr)
    return True
