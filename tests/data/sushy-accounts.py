"""sushy-tools with a DMTF AccountService over its own basic-auth file.

sushy-tools has no AccountService, so a Redfish password rotation has nothing to talk to.
This wrapper runs sushy-emulator unchanged (same arguments) and adds the resources a BMC
has for it: /redfish/v1/AccountService, its Accounts collection (one account per user of
the htpasswd file sushy authenticates against) and PATCH {"Password": ...} on an account,
which rewrites that user's bcrypt entry atomically. sushy reads the file on every request,
so the new password is the only one that works from the next request on. The service root
links the AccountService.
"""

import json
import os
import sys

import bcrypt
import flask

from sushy_tools.emulator import main

app = main.app
ACCOUNTS = "/redfish/v1/AccountService/Accounts"


def auth_file():
    return app.config["SUSHY_EMULATOR_AUTH_FILE"]


def users():
    with open(auth_file()) as f:
        return [line.split(":", 1)[0] for line in f if ":" in line]


def problem(status, message):
    body = {"error": {"code": "Base.1.0.GeneralError", "message": message}}
    return flask.Response(json.dumps(body), status=status, mimetype="application/json")


@app.route("/redfish/v1/AccountService")
def account_service():
    return flask.jsonify({
        "@odata.type": "#AccountService.v1_5_0.AccountService",
        "@odata.id": "/redfish/v1/AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "Accounts": {"@odata.id": ACCOUNTS},
    })


@app.route(ACCOUNTS)
def accounts():
    members = [{"@odata.id": f"{ACCOUNTS}/{i + 1}"} for i in range(len(users()))]
    return flask.jsonify({
        "@odata.type": "#ManagerAccountCollection.ManagerAccountCollection",
        "@odata.id": ACCOUNTS,
        "Name": "Accounts",
        "Members": members,
        "Members@odata.count": len(members),
    })


@app.route(ACCOUNTS + "/<int:ident>", methods=["GET", "PATCH"])
def account(ident):
    names = users()
    if not 1 <= ident <= len(names):
        return problem(404, f"no account {ident}")
    user = names[ident - 1]
    if flask.request.method == "PATCH":
        body = flask.request.get_json(force=True, silent=True) or {}
        password = body.get("Password")
        if not isinstance(password, str) or not password:
            return problem(400, "Password must be a non-empty string")
        if len(password.encode()) > 72:
            # The account policy of this BMC (bcrypt reads at most 72 bytes).
            return problem(400, "Password must be at most 72 bytes")
        digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
        with open(auth_file()) as f:
            lines = f.read().splitlines()
        lines = [f"{user}:{digest}" if line.startswith(user + ":") else line for line in lines]
        tmp = auth_file() + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, auth_file())
        return flask.Response(status=204)
    return flask.jsonify({
        "@odata.type": "#ManagerAccount.v1_4_0.ManagerAccount",
        "@odata.id": f"{ACCOUNTS}/{ident}",
        "Id": str(ident),
        "Name": "User Account",
        "UserName": user,
        "RoleId": "Administrator",
        "Enabled": True,
    })


@app.after_request
def link_account_service(response):
    if flask.request.path.rstrip("/") == "/redfish/v1" and response.is_json:
        body = response.get_json()
        body["AccountService"] = {"@odata.id": "/redfish/v1/AccountService"}
        response.set_data(json.dumps(body))
    return response


if __name__ == "__main__":
    sys.exit(main.main())
