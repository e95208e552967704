"""English dates as Django writes them, with times of day in 24 hours: goaai shows
one clock everywhere (HH:MM), in its pages, its admin and its scripts alike. The
formats not named here are Django's own for English."""

TIME_FORMAT = "H:i"
DATETIME_FORMAT = "N j, Y, H:i"
SHORT_DATETIME_FORMAT = "m/d/Y H:i"
