"""Personalized federated learning: transforms whose clients keep weights of their own in a per-client store
(``Personalized``), in front of a strategy of the sums path: ``FedPer``, ``FedRep``, ``FedBN``, ``Ditto`` and
``APFL``."""

from lightfed.personalization.apfl import APFL
from lightfed.personalization.ditto import Ditto
from lightfed.personalization.fedbn import FedBN
from lightfed.personalization.fedper import FedPer
from lightfed.personalization.fedrep import FedRep
from lightfed.personalization.personal_coordinates import PersonalCoordinates
from lightfed.personalization.personalized import Personalized

__all__ = ["APFL", "Ditto", "FedBN", "FedPer", "FedRep", "PersonalCoordinates", "Personalized"]
