// goaai: the pages without a chat on them, the session list and "New chat".
import { startPage } from "./page.js";
import { startSessionList } from "./session-list.js";

startPage();
startSessionList();
