"""A datacenter and an application on it, shared by the dashboard's tests."""

from __future__ import annotations

from lxml import etree

DATACENTER = {
    "resources": ["cpu"],
    "levels": ["room", "rack", "host", "numa"],
    "location": [{"name": "room1", "level": "room", "children": [
        {"name": "rack1", "level": "rack", "children": [
            {"name": "h1", "level": "host", "agent": "local", "capacity": {"cpu": 2}},
            {"name": "h2", "level": "host", "agent": "local", "capacity": {"cpu": 2}}]},
        {"name": "rack2", "level": "rack", "children": [
            {"name": "h3", "level": "host", "agent": "local", "children": [
                {"name": "h3-numa0", "level": "numa", "capacity": {"cpu": 1}},
                {"name": "h3-numa1", "level": "numa", "capacity": {"cpu": 1}}]},
            {"name": "h4", "level": "host", "agent": "local", "capacity": {"cpu": 4}},
            {"name": "h5", "level": "host", "agent": "http://127.0.0.1:9/cddlm/portal",
             "capacity": {"cpu": 4}}]}]}],
}

# what the worker prints: markup that must stay text on every page
HOSTILE_STDERR = "<script>window.__pwned = 1</script>"
HOSTILE_NAME = '<img src=x onerror="window.__pwned = 2">'

SHOP = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="site" type="compound">
    <component name="web" type="process">
      <attribute name="argv"><item>python3</item><item>-u</item><item>-m</item><item>http.server</item>
        <item>0</item><item>--bind</item><item>127.0.0.1</item></attribute>
      <attribute name="readiness"><item name="log">Serving HTTP</item></attribute>
      <attribute name="demand"><item name="cpu">1</item></attribute>
    </component>
    <component name="worker" type="process">
      <attribute name="argv"><item>sh</item><item>-c</item>
        <item>echo 'worker started'; echo '%s' &gt;&amp;2; exec sleep 600</item></attribute>
      <attribute name="demand"><item name="cpu">1</item></attribute>
    </component>
  </component>
  <component name="db" type="process">
    <attribute name="argv"><item>sleep</item><item>600</item></attribute>
    <attribute name="demand"><item name="cpu">1</item></attribute>
  </component>
  <group name="spread"><member>site/web</member><member>site/worker</member><member>db</member></group>
  <policy type="anti-collocation" level="host" group="spread" hard="false" weight="2"/>
</application>""" % HOSTILE_STDERR.replace("<", "&lt;").replace(">", "&gt;")


def shop_descriptor() -> etree._Element:
    return etree.fromstring(SHOP.encode())
