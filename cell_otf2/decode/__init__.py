"""From slots to a decoded trace: locations, records in program order and clock domains
(``decoder``), SPE live intervals (``intervals``) and the pairs of what belongs together
(``match``). It does not order or synchronize."""
