"""The read-only web dashboard, served by the portal itself at ``{base}/``.

    /                                         applications (filters: state, name; paging)
    /applications/{id}                        one application (?component=PATH picks the logs shown)
    /datacenter                               the datacenter as a picture, with the components on it
    /hosts                                    hosts (state, capacity, who serves them) and live portals
    /static/{file}                            the page's own CSS and JavaScript
    /api/v1/...                               the JSON read API behind it (docs/dashboard.md)

It reads through ``cddlm.application.views`` with the request's principal and never opens the
store itself; nothing it answers changes anything.
"""
