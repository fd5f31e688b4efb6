"""Personalized federated learning: wrappers around a sums strategy whose clients keep weights of their own in the
per-client store (``Personalized``): ``FedPer``, ``FedRep``, ``FedBN``, ``Ditto`` and ``APFL``."""

from lightfed.personalization.apfl import APFL
from lightfed.personalization.ditto import Ditto
from lightfed.personalization.fedbn import FedBN
from lightfed.personalization.fedper import FedPer
from lightfed.personalization.fedrep import FedRep
from lightfed.personalization.personal_coordinates import PersonalCoordinates
from lightfed.personalization.personalized import Personalized, personalization_of

__all__ = ["APFL", "Ditto", "FedBN", "FedPer", "FedRep", "PersonalCoordinates", "Personalized", "personalization_of"]
