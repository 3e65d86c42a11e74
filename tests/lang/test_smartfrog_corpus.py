"""The SmartFrog CDL conformance corpus (../shared/conformance/smartfrog-cdl, read in place):
every .cdl document behaves as its README says. ``classpath:/`` imports resolve through the
import path described there."""

from __future__ import annotations

import pytest
from lxml import etree

from cddlm.application import descriptors
from cddlm.errors import DescriptorError, ResolutionError

RESOLVE = "resolve"
# every .cdl file of the corpus, with what its README expects (reject: the error kind)
EXPECTED = {
    # CDL-1.0 test documents
    "extras/cdl/test/files/sfcdl/valid/simple.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/compound.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/echo.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/echo-system.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/message.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/message-box.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/lazy1.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/exec.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/fun.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/jboss.cdl": RESOLVE,
    "extras/cdl/test/files/sfcdl/valid/open-mp3.cdl": RESOLVE,
    # CDL-1.0 demos
    "extras/cdl/demo/composite.cdl": ("reject", "not-well-formed"),   # prefix demo undeclared
    "extras/cdl/demo/fedora.cdl": RESOLVE,
    "extras/cdl/demo/win98.cdl": RESOLVE,
    "extras/cdl/demo/open-mp3.cdl": RESOLVE,
    "extras/cdl/demo/jboss-dos.cdl": RESOLVE,
    "extras/cdl/demo/jboss.cdl": RESOLVE,
    "extras/cdl/demo/message-box.cdl": RESOLVE,
    "extras/cdl/demo/sound.cdl": RESOLVE,
    # library documents (imported through classpath:/)
    "extras/cdl/src/org/smartfrog/services/cddlm/cdl/base/components.cdl": RESOLVE,
    "extras/cdl/src/org/smartfrog/services/cddlm/cdl/base/filesystem.cdl":
        ("reject", "not-well-formed"),                                 # mismatched end tag
    "extras/cdl/src/org/smartfrog/services/cddlm/cdl/cmp/components.cdl": RESOLVE,
    "extras/cdl/src/org/smartfrog/services/cddlm/cdl/demo/components.cdl": RESOLVE,
    "extras/cdl/src/org/smartfrog/services/cddlm/cdl/demo/fun.cdl": RESOLVE,
    "extras/cdl/src/org/smartfrog/services/cddlm/cdl/demo/jboss.cdl": RESOLVE,
    "components/deployapi/src/org/smartfrog/services/deployapi/components/hosting/components.cdl":
        RESOLVE,
    # the 2004 draft (namespace http://gridforge.org/cddlm/xml/2004/07/30/) and older drafts:
    # a CDL 1.0 parser rejects all of them for their namespace, whatever the draft thought
    "components/cddlm/test/files/cdl/valid/minimal.cdl": ("reject", "wrong-namespace"),
    "components/cddlm/test/files/cdl/valid/webserver.cdl": ("reject", "wrong-namespace"),
    "components/cddlm/test/files/cdl/invalid/wrong_doc_namespace.cdl": ("reject", "wrong-namespace"),
    "components/cddlm/test/files/cdl/invalid/wrong_elt_order.cdl": ("reject", "wrong-namespace"),
    "components/cddlm/test/files/cdl/invalid/wrong_root_elt_type.cdl": ("reject", "wrong-namespace"),
    "components/cddlm/test/files/cdl/invalid/unsupported_pathlanguage.cdl":
        ("reject", "wrong-namespace"),
    "components/cddlm/test/files/cdl/invalid/duplicate-names.cdl": ("reject", "wrong-namespace"),
    "components/cddlm/test/org/smartfrog/services/cddlm/test/unit/cdl/webserver.cdl":
        ("reject", "wrong-namespace"),
    "components/cddlm/src/org/smartfrog/services/cddlm/xsd/webserver.cdl": ("reject", "wrong-namespace"),
}
CDL = "{http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0}"


def import_path(corpus) -> tuple[str, ...]:
    return (str(corpus / "extras/cdl/src"), str(corpus / "components/deployapi/src"))


def resolve(corpus, relative: str):
    return descriptors.resolve_file(str(corpus / relative), import_path=import_path(corpus),
                                    require_components=False)


def test_the_table_names_every_cdl_document(corpus):
    found = {str(p.relative_to(corpus)) for p in corpus.rglob("*.cdl")}
    assert found == set(EXPECTED)


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_document_behaves_as_the_readme_says(corpus, relative):
    expected = EXPECTED[relative]
    if expected == RESOLVE:
        result = resolve(corpus, relative)
        system = etree.fromstring(result.display.encode())
        assert system.tag == CDL + "system"
        assert not any(a.startswith("{urn:cddlm:internal") for e in system.iter() for a in e.attrib)
        # what deploys is a separate question: none of these use the cddlm component library
        assert result.deployment.components == []
    else:
        with pytest.raises((DescriptorError, ResolutionError)) as info:
            resolve(corpus, relative)
        assert info.value.kind == expected[1]
        assert info.value.file == str(corpus / relative)


def _child(el, path):
    for step in path.split("/"):
        el = next(c for c in el if etree.QName(c).localname == step)
    return el


def test_sibling_reference_copies_the_target_value(corpus):
    # <sfClass cdl:ref="cmp:CommandPath"/> next to <cmp:CommandPath>...EchoImpl</cmp:CommandPath>
    system = etree.fromstring(resolve(corpus, "extras/cdl/test/files/sfcdl/valid/echo-system.cdl")
                              .display.encode())
    assert _child(system, "sfClass").text == "org.smartfrog.services.cddlm.cdl.demo.EchoImpl"
    assert _child(system, "sfClass").get(CDL + "ref") is None


def test_extends_chain_with_overrides_and_relative_references(corpus):
    system = etree.fromstring(resolve(corpus, "extras/cdl/test/files/sfcdl/valid/jboss.cdl")
                              .display.encode())
    jboss = _child(system, "jboss")
    # jboss:JBossOnDOS overrides homeDir; jboss:JBoss's <workDir cdl:ref="homeDir"/> sees it
    assert _child(jboss, "server/workDir").text == "c:\\Java\\Apps\\jboss-4.0\\"
    # <destination cdl:ref="../server/deployDir"/> inside jboss:demoWebApp
    assert _child(jboss, "demoWebApp/destination").text == "c:\\Java\\Apps\\jboss-4.0\\default"
    assert _child(jboss, "liveness/page").text == "diary"
    # the overriding element keeps the inherited attributes it lacks (sfi:type from demo:Run)
    assert _child(jboss, "server/workDir").get("{http://smartfrog.org/types/2006/01/}type") == \
        "trimmed"
    # a value overrides an inherited reference: LivenessPage's own sfClass, not cmp:CommandPath's
    assert _child(jboss, "liveness/sfClass").text == "org.smartfrog.services.www.LivenessPageComponent"


def test_namespaced_import_rehomes_unprefixed_prototypes(corpus):
    system = etree.fromstring(resolve(corpus, "extras/cdl/test/files/sfcdl/valid/exec.cdl")
                              .display.encode())
    echo3 = _child(system, "echo3")   # extends the configuration's echo2, which extends demo:echo
    assert _child(echo3, "message").text == "hello"
    assert _child(echo3, "gui").text == "false"
    assert _child(system, "run/processName").text == "tomcat"


def test_lazy_reference_stays_unresolved(corpus):
    system = etree.fromstring(resolve(corpus, "extras/cdl/test/files/sfcdl/valid/lazy1.cdl")
                              .display.encode())
    user = _child(system, "app/user")
    assert user.get(CDL + "lazy") == "true"
    assert user.get(CDL + "refroot") == "toplevel"
    assert user.text is None and len(user) == 0

