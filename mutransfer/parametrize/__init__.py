"""μP as data and its application to a model: roles, rule sets and multipliers, layer
recognition, base shapes, init laws, forward multipliers and hidden ones, param groups;
:class:`~mutransfer.parametrize.parametrization.Parametrization`; folding the
multipliers into the weights."""
