"""The Kopf shell: the operator process (scheduler, admission webhook, leader election) over the pure
placement core. `translate` maps API objects to core terms; `scheduler` is the assume-then-bind loop;
`handlers` are the Kopf registrations; `command` is `fgpu operator`."""
