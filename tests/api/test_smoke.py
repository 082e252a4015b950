def test_submit_and_match(client):
    r = client.post("/jobs", json={"jobs": [{"owner": "a", "owner_group": "g", "sites": ["S1"]}]})
    assert r.status_code == 201, r.text
    job_id = r.json()["jobs"][0]["job_id"]
    r = client.post("/match", json={"Site": "S1", "CPUTime": 10**6, "PilotReference": "p1"})
    assert r.status_code == 200, r.text
    assert r.json()["job_id"] == job_id
    assert r.json()["pilot_reference"] == "p1"
    assert client.post("/match", json={"Site": "S1", "CPUTime": 10**6}).status_code == 204
